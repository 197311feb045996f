"""A student walks through the editors lesson in a real browser: the step turns done once their
Copilot request, sent through the real gateway to the real llama-server, is in the request log;
then they answer the check questions and the progress page shows the lesson complete.

Playwright drives Debian's Chromium (/usr/bin/chromium; scripts/ensure_browser.sh installs it),
headless; it never downloads a browser. Sign-in pages are the portal's, so the browser gets the
session cookie of a session created by Django's test client. Pages come from pytest-django's
live server (it serves the static files too, so the screenshot shows the real layout); the
request goes through the session's gateway, which writes to the same test database.
"""
from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from playwright.sync_api import expect

from inference.models import RequestLog
from lessons.syllabus import load_catalogue
from tests.browser.conftest import signed_in_context
from tests.conftest import MODEL_ID, wait_for
from tests.lessons.helpers import copilot_agent_session

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"


def test_a_student_does_the_editor_step_and_the_questions(  # noqa: PLR0915
    browser, live_server, gateway, worker, student, student_key,  # noqa: ANN001
) -> None:
    context = signed_in_context(browser, live_server, student)
    page = context.new_page()
    lesson = load_catalogue().lesson("editors")
    assert lesson is not None

    page.goto(f"{live_server.url}/lessons/editors/")
    assert page.locator("#lesson-title").inner_text().startswith("6. Copilot BYOK and Claude Code")
    status = page.locator('[data-step-status="first-editor-request"]')
    assert status.inner_text() == "not yet"
    page.click("#check-first-editor-request")
    # The reason is shown in the step, where the Check's redirect lands (not at the top of the page).
    note = page.locator('[data-step-note="first-editor-request"]')
    assert "Not yet:" in note.inner_text()
    expect(note).to_be_in_viewport()

    # Copilot's Ollama provider: the key in the URL, no auth header, streamed chats that carry an
    # agent's system prompt and tools, two turns of one conversation.
    _, raw_key = student_key
    tools, turns = copilot_agent_session()
    request_ids, measured_ms = [], []
    for messages in turns:
        sent = time.perf_counter()
        first_content: float | None = None
        with httpx.stream("POST", f"{gateway.url}/ollama/{raw_key}/v1/chat/completions", timeout=120,
                          headers={"User-Agent": "GitHubCopilotChat/0.31.0"},
                          json={"model": MODEL_ID, "stream": True, "stream_options": {"include_usage": True},
                                "max_tokens": 8, "tools": tools, "messages": messages}) as response:
            assert response.status_code == 200
            request_ids.append(response.headers["x-request-id"])
            text = ""
            for piece in response.iter_text():
                if first_content is None and '"content":"' in piece:
                    first_content = time.perf_counter()
                text += piece
            assert "[DONE]" in text
        measured_ms.append(1000 * ((first_content or time.perf_counter()) - sent))
    assert wait_for(lambda: RequestLog.objects.filter(user=student, status=200).count() == 2, timeout_s=15)
    logged = RequestLog.objects.get(request_id=request_ids[0])
    assert (logged.tools_n, logged.turns) == (3, 1) and logged.system_chars > 1_500 and logged.conversation

    page.click("#check-first-editor-request")
    assert "Done: GitHub Copilot at work: 2 requests of one session" in note.inner_text()
    assert page.locator('[data-step-status="first-editor-request"]').inner_text() == "done"
    assert "it-worker" in page.locator("#live-panel").inner_text()  # the panel shows the request's worker

    for number, question in enumerate(lesson.questions):
        form = page.locator(f"#question-{question.id}")
        if number == 0:  # a wrong answer first: it is saved and marked, then corrected
            form.get_by_label(question.choices[(question.answer + 1) % len(question.choices)]).check()
            form.get_by_role("button", name="Save answer").click()
            assert page.locator(f'#question-{question.id} [data-verdict="wrong"]').is_visible()
            form = page.locator(f"#question-{question.id}")
        form.get_by_label(question.choices[question.answer]).check()
        form.get_by_role("button", name="Save answer").click()
        assert page.locator(f'#question-{question.id} [data-verdict="right"]').is_visible()

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "lesson-editors.png"), full_page=True)

    page.goto(f"{live_server.url}/lessons/progress/")
    row = page.locator('tr[data-lesson="editors"]').inner_text()
    assert "1/1" in row and "3/3" in row and row.rstrip().endswith("yes")
    assert "Not finished yet:" in page.locator("#finished-status").inner_text()  # six lessons to go
    page.screenshot(path=str(SCREENSHOTS / "lesson-progress.png"), full_page=True)

    # The scheduling lesson's live fleet panel refreshes itself from /lessons/fleet.json.
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    with page.expect_response(lambda response: response.url.endswith("/lessons/fleet.json")) as polled:
        page.goto(f"{live_server.url}/lessons/scheduling/")
    assert polled.value.status == 200
    page.wait_for_timeout(300)
    assert "it-worker" in page.locator("#fleet-workers").inner_text()
    assert "0/4" in page.locator("#fleet-workers").inner_text() and not errors
    page.screenshot(path=str(SCREENSHOTS / "lesson-scheduling.png"), full_page=True)

    page.goto(f"{live_server.url}/lessons/measurement/")
    assert "it-worker" in page.locator("#my-ttfts").inner_text()  # the request streamed above
    assert request_ids[0] in page.locator("#my-ttfts").inner_text()
    page.fill("#request-id-measure-ttft", request_ids[0])
    page.fill("#ttft-measure-ttft", "1")  # made up, and faster than the gateway saw it
    page.click("#check-measure-ttft")
    assert "does not fit request" in page.locator('[data-step-note="measure-ttft"]').inner_text()
    page.fill("#request-id-measure-ttft", request_ids[0])
    page.fill("#ttft-measure-ttft", f"{measured_ms[0]:.1f}")  # what this test measured on its side
    page.click("#check-measure-ttft")
    assert "Done: you measured" in page.locator('[data-step-note="measure-ttft"]').inner_text()
    page.screenshot(path=str(SCREENSHOTS / "lesson-measurement.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/lessons/")
    assert page.locator(".lesson-list li").count() == len(load_catalogue().lessons)
    page.screenshot(path=str(SCREENSHOTS / "lessons-index-phone.png"), full_page=True)
    context.close()


def test_a_teacher_ticks_the_manual_check_and_sees_the_class_table(  # noqa: ANN001
    browser, live_server, teacher, student, transactional_db, taught_class,
) -> None:
    context = signed_in_context(browser, live_server, teacher)
    page = context.new_page()

    page.goto(f"{live_server.url}/ground0/")
    row = page.locator("#deliverable-contracts")
    assert row.get_attribute("data-state") == "open"
    row.get_by_label("Note").fill("reviewed agent-api.md and fleet.md with the team")
    row.get_by_role("button", name="Tick").click()
    row = page.locator("#deliverable-contracts")
    assert row.get_attribute("data-state") == "done"
    assert "ticked by teacher on" in row.inner_text()
    assert page.locator("#deliverable-copilot-path").get_attribute("data-state") == "open"
    page.screenshot(path=str(SCREENSHOTS / "ground0.png"), full_page=True)

    page.goto(f"{live_server.url}/lessons/teacher/")
    assert page.locator('tr[data-student="alice"] .finished-cell').inner_text() == "no"
    with page.expect_download() as download:
        page.get_by_role("link", name="Export every class (CSV)").click()
    assert "alice" in Path(download.value.path()).read_text()
    page.screenshot(path=str(SCREENSHOTS / "lessons-teacher.png"), full_page=True)
    context.close()
