"""The one-place rules: which tool is an editor, when a reported TTFT matches, what "finished" is."""
from __future__ import annotations

import pytest

from lessons.syllabus import load_catalogue
from lessons.editor_clients import editor_kind
from lessons.progress import summarise
from lessons.ttft_check import ttft_fits
from lessons.why_chosen import why_chosen


@pytest.mark.parametrize(("client", "agent", "path", "kind"), [
    ("anthropic", "claude-cli/2.1.197 (external, cli)", "/v1/messages", "claude-code"),
    ("openai", "GitHubCopilotChat/0.31.0", "/v1/chat/completions", "copilot"),
    ("ollama", "node-fetch", "/ollama/<redacted>/v1/chat/completions", "copilot"),
    ("ollama", "GitHubCopilotChat/0.31.0", "/ollama/<redacted>/api/tags", None),  # discovery, not a chat
    ("openai", "curl/8.5.0", "/v1/chat/completions", None),
    ("openai", "OpenAI/Python 2.1.0", "/v1/chat/completions", None),
    ("anthropic", "Anthropic/Python 0.40.0", "/v1/messages", None),
    ("anthropic", "claude-cli/2.1.197", "/v1/messages/count_tokens", None),
])
def test_editor_kind(client: str, agent: str, path: str, kind: str | None) -> None:
    assert editor_kind(client=client, user_agent=agent, path=path) == kind


def test_a_reported_ttft_fits_only_from_the_logged_one_to_the_tolerance_above() -> None:
    assert ttft_fits(180, 180) and ttft_fits(179.6, 180)  # equal (the log rounds to whole ms)
    assert not ttft_fits(170, 180) and not ttft_fits(100, 180)  # faster than the gateway saw it: impossible
    assert ttft_fits(580, 180) and not ttft_fits(581, 180)  # 400 ms floor above
    assert ttft_fits(4500, 3000) and not ttft_fits(4501, 3000)  # half of 3000 above
    assert not ttft_fits(2000, 3000)


def test_finished_needs_every_step_and_every_right_answer() -> None:
    catalogue = load_catalogue()
    right = {q.id: q.answer for q in catalogue.questions}
    steps = [s.slug for s in catalogue.steps]
    assert summarise(catalogue, done_steps=steps, answers=right).finished
    assert not summarise(catalogue, done_steps=steps[1:], answers=right).finished
    wrong = dict(right)
    question = catalogue.questions[0]
    wrong[question.id] = (question.answer + 1) % len(question.choices)
    progress = summarise(catalogue, done_steps=steps, answers=wrong)
    assert not progress.finished and progress.lessons_complete == len(catalogue.lessons) - 1
    assert progress.correct == progress.questions_total - 1


def test_why_chosen_tells_lending_failover_and_queueing() -> None:
    plain = why_chosen(retries=0, request_pool="production", worker_pool="production", queue_wait_ms=0, cached_tokens=0)
    assert len(plain) == 1 and "least busy" in plain[0]
    busy = " ".join(why_chosen(retries=2, request_pool="production", worker_pool="dev", queue_wait_ms=350,
                               cached_tokens=12))
    assert "pool `dev` lent" in busy and "2 workers failed" in busy and "350 ms" in busy and "12 prompt tokens" in busy


def test_a_small_share_of_the_ceiling_never_reads_as_zero() -> None:
    """12.5 of 2,650 tok/s read "= 0% of the ceiling"."""
    from lessons.templatetags.lessons_extras import share_text

    assert share_text(100 * 12.5 / 2650) == "0.5 %"
    assert share_text(0.02) == "under 0.1 %" and share_text(79.1) == "79 %" and share_text(None) == "—"


def test_a_key_used_seconds_ago_was_used_just_now() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from portal.templatetags.portal import ago

    assert ago(timezone.now() - timedelta(seconds=20)) == "just now"
    assert ago(timezone.now() - timedelta(minutes=5)) == "5\xa0minutes ago"
    assert ago(None) == "never"
