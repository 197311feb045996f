"""The pure parts: CSV parsing, per-day statistics, the connect snippets, rounding."""
from __future__ import annotations

import json
from datetime import date

import pytest

from core.numbers import ms_text, percent_of, rate_text, tokens_text
from portal.connect import KEY_PLACEHOLDER, ConnectModel, setups
from portal.csv_import import CsvProblem, parse_students_csv
from portal.fleet_status import cold_starts_s
from portal.stats import bar_heights, daily_stats


def test_csv_header_optional_names_split_usernames_lowered() -> None:
    rows = parse_students_csv("\ufeffusername,email,name\nAmy,amy@s.example,Amy van Dyke\n\nbo\n")
    assert [(r.username, r.email, r.first_name, r.last_name) for r in rows] == [
        ("amy", "amy@s.example", "Amy", "van Dyke"), ("bo", "", "", "")]


@pytest.mark.parametrize("text, problem", [
    ("a b,,\n", "line 1: 'a b' is not a valid username"),
    ("amy,not-an-email,\n", "line 1: 'not-an-email' is not an email address"),
    ("amy,,\nAMY,,\n", "line 2: amy appears twice"),
    ("a,b,c,d\n", "line 1: expected 3 columns"),
    ("username,email,name\n", "the file has no students"),
    ("amy,,\x00\n", "the file is not a CSV text file"),
    ('amy,"unclosed\n', "line 1: 'unclosed' is not an email address"),
])
def test_csv_problems_name_the_line(text: str, problem: str) -> None:
    with pytest.raises(CsvProblem) as raised:
        parse_students_csv(text)
    assert any(p.startswith(problem) for p in raised.value.problems), raised.value.problems


def test_daily_stats_medians_skip_missing_values() -> None:
    d1, d2 = date(2026, 11, 1), date(2026, 11, 2)
    days = daily_stats([(d2, 10, 5, 100, 50.0, 200), (d1, 1, 1, None, None, 429), (d2, 20, 5, 300, 70.0, 200),
                        (d2, 0, 0, 200, 60.0, 200)])
    assert [d.day for d in days] == [d1, d2]
    assert (days[0].requests, days[0].errors, days[0].median_ttft_ms, days[0].median_tokens_per_s) == (1, 1, None, None)
    assert (days[1].requests, days[1].tokens, days[1].median_ttft_ms, days[1].median_tokens_per_s) == (3, 40, 200, 60.0)


def test_bar_heights() -> None:
    assert bar_heights([0, 5, 10], height=100) == [0, 50, 100]
    assert bar_heights([0, 0], height=100) == [0, 0]
    assert bar_heights([], height=100) == []


def test_rounding_for_people() -> None:
    assert rate_text(89.68380054322759) == "89.7"
    assert rate_text(1234.56) == "1,235"
    assert rate_text(None) == "—"
    assert tokens_text(1234) == "1,234" and tokens_text(2_500_000) == "2.5M" and tokens_text(25_000_000) == "25M"
    assert ms_text(850) == "850 ms" and ms_text(1234) == "1.2 s" and ms_text(75_000) == "75 s"
    assert percent_of(50, 200) == 25 and percent_of(500, 200) == 100 and percent_of(5, 0) == 0


def test_custom_endpoint_entry_is_valid_json_with_the_models() -> None:
    models = [ConnectModel(id="m1", usable_context=8192, max_output_tokens=2048, tools=True)]
    snippets = setups(site="https://ai.school.example", models=models, key="ocs-abc")
    entry = json.loads(snippets["vscode_chat"])[0]
    assert entry["vendor"] == "customendpoint" and entry["apiType"] == "chat-completions" and entry["apiKey"] == "ocs-abc"
    assert entry["models"] == [{"id": "m1", "name": "OCS m1", "url": "https://ai.school.example/v1/chat/completions",
                                "toolCalling": True, "vision": False, "maxInputTokens": 6144, "maxOutputTokens": 2048}]
    assert json.loads(snippets["vscode_responses"])[0]["models"][0]["url"].endswith("/v1/responses")
    assert json.loads(snippets["vscode_messages"])[0]["apiType"] == "messages"
    assert "ANTHROPIC_BASE_URL=https://ai.school.example\n" in snippets["claude_code"]
    assert "COPILOT_PROVIDER_BASE_URL=https://ai.school.example/v1\n" in snippets["copilot_cli"]
    assert 'base_url = "https://ai.school.example/v1"' in snippets["codex"] and 'wire_api = "responses"' in snippets["codex"]
    assert snippets["ollama_url"] == "https://ai.school.example/ollama/ocs-abc"


def test_snippets_use_the_placeholder_without_a_key_and_a_fallback_model() -> None:
    snippets = setups(site="http://h", models=[])
    assert KEY_PLACEHOLDER in snippets["curl"] and "MODEL-ID" in snippets["curl"]


def test_cold_start_is_each_workers_latest_recorded_one() -> None:
    events = [(1, None), (1, 12.04), (1, 30.0), (2, None)]  # newest first
    assert cold_starts_s(events) == {1: 12.0}


def test_connect_warns_per_client_when_the_model_cannot_hold_its_first_request() -> None:
    from portal.connect import ConnectModel, context_warnings

    small = ConnectModel("smollm2", usable_context=4096, max_output_tokens=1024, tools=True)
    big = ConnectModel("smollm2-agents", usable_context=32768, max_output_tokens=4096, tools=True)
    warnings = context_warnings([small])
    assert set(warnings) == {"copilot_cli", "codex"}  # Claude Code's ~3,050 fit in 4,096
    assert "5,400 tokens" in warnings["copilot_cli"] and "agents profile" in warnings["copilot_cli"]
    assert "Use `smollm2-agents`" in context_warnings([small, big])["codex"]
    assert context_warnings([big, small]) == {} and context_warnings([]) == {}
