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
    models = [ConnectModel(id="m1", usable_context=32768, max_output_tokens=2048, tools=True)]
    snippets = setups(site="https://ai.school.example", models=models, key="ocs-abc")
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


def test_connect_names_per_client_a_model_that_holds_its_first_request_and_room() -> None:
    from portal.connect import ConnectModel, context_warnings

    small = ConnectModel("smollm2", usable_context=4096, max_output_tokens=1024, tools=True)
    big = ConnectModel("smollm2-agents", usable_context=32768, max_output_tokens=4096, tools=True)
    warnings = context_warnings([small])
    # Claude Code's ~3,050 tokens fit in 4,096, but not with the 13,000 it keeps free to compact.
    assert set(warnings) == {"copilot_cli", "codex", "claude_code"}
    assert warnings["copilot_cli"].startswith("Won't work with this model: Copilot CLI's first request is bigger "
                                              "than the model's memory")
    assert "agents profile" in warnings["copilot_cli"] and "about 6,424 tokens" in warnings["copilot_cli"]
    assert "about 17,074 tokens" in warnings["claude_code"]  # 3,050 + 1,024 + 13,000
    assert context_warnings([small, big])["codex"].startswith("Set up with `smollm2-agents`: `smollm2` (4,096 tokens)")
    assert context_warnings([big, small]) == {} and context_warnings([]) == {}


def test_a_set_up_that_cannot_fit_names_no_model_and_one_that_can_names_the_model_that_fits() -> None:
    from portal.connect import ConnectModel, client_fits

    small = ConnectModel("small", usable_context=4096, max_output_tokens=2048, tools=True)
    big = ConnectModel("big", usable_context=32768, max_output_tokens=4096, tools=True)
    assert {snippet: fit.model for snippet, fit in client_fits([small]).items()} == {
        "copilot_cli": None, "claude_code": None, "codex": None}
    snippets = setups(site="http://h", models=[small, big])
    assert "export ANTHROPIC_MODEL=big\n" in snippets["claude_code"] and "COPILOT_MODEL=big\n" in snippets["copilot_cli"]
    assert 'model = "big"' in snippets["codex"]


def test_claude_code_is_told_the_models_window_and_answer_cap() -> None:
    from portal.connect import ConnectModel, claude_code_compact_at

    agents = ConnectModel("smollm2-135m-agents", usable_context=32768, max_output_tokens=4096, tools=True)
    snippet = setups(site="http://h", models=[agents])["claude_code"]
    assert "export CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768\n" in snippet
    # Without it, 2.1.197 never compacts before the API refuses the prompt.
    assert "export CLAUDE_CODE_AUTO_COMPACT_WINDOW=32768\n" in snippet
    assert "export CLAUDE_CODE_MAX_OUTPUT_TOKENS=4096\n" in snippet
    # Claude Code 2.1.197: window - min(answer cap, 20,000) - 13,000.
    assert claude_code_compact_at(agents) == 15672
    long_answers = ConnectModel("m", usable_context=131072, max_output_tokens=32768, tools=True)
    assert claude_code_compact_at(long_answers) == 131072 - 20000 - 13000


def test_codex_gets_the_window_and_a_compaction_limit_that_leaves_room_for_an_answer() -> None:
    import tomllib

    from portal.connect import ConnectModel

    agents = ConnectModel("smollm2-135m-agents", usable_context=32768, max_output_tokens=4096, tools=True)
    snippet = setups(site="http://h", models=[agents])["codex"]
    config = tomllib.loads(snippet[:snippet.index("# then")])
    assert config["model_context_window"] == 32768
    assert config["model_auto_compact_token_limit"] == 22937  # 80 % of 32,768 - 4,096
    assert config["model_auto_compact_token_limit"] + 4096 < config["model_context_window"]
    assert config["model_providers"]["ocs"]["wire_api"] == "responses"
    assert "git init" in snippet


def test_vscode_entries_leave_room_for_the_1_133_over_count_where_the_model_has_it() -> None:
    from portal.connect import ConnectModel, windows

    small = ConnectModel("small", usable_context=4096, max_output_tokens=2048, tools=True)
    agents = ConnectModel("agents", usable_context=32768, max_output_tokens=4096, tools=True)
    entries = json.loads(setups(site="http://h", models=[small, agents])["vscode_chat"])[0]["models"]
    limits = {e["id"]: (e["maxInputTokens"], e["maxOutputTokens"]) for e in entries}
    assert limits == {"small": (2048, 2048), "agents": (32768 - 4096 - 16384, 4096)}
    assert windows([small, agents]).vscode_tight == ["small"]
    assert setups(site="http://h", models=[])["vscode_setting"] == '"chat.agentHost.byokModels.enabled": true'
