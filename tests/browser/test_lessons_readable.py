"""Every lesson page, the progress, summary, teacher and burndown pages in a real browser at a
phone's width (390 px) and a laptop's (1366 px): axe-core finds no serious or critical
violation (contrast included) and no page scrolls sideways. The recipes carry this site's
address and model, never the HOST / MODEL placeholders.

Pages come from pytest-django's live server (it serves the static files, so the real CSS is
measured); no gateway or llama-server is needed, the request log rows are written as the
gateway writes them."""
from __future__ import annotations

from typing import Any

import pytest

from fleet.services import worker_register
from lessons.syllabus import load_catalogue
from tests.browser.conftest import LAPTOP, PHONE, SCREENSHOTS, page_problems, signed_in_context
from tests.lessons.helpers import COPILOT_AGENT, log_request

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass

LESSON_PAGES = [f"/lessons/{lesson.slug}/" for lesson in load_catalogue().lessons]
STUDENT_PAGES = ["/lessons/", *LESSON_PAGES,
                 "/lessons/progress/", "/lessons/summary/", "/lessons/start/", "/ground0/"]
TEACHER_PAGES = ["/lessons/teacher/", "/ground0/"]


def test_every_lesson_and_burndown_page_is_readable_at_both_widths(  # noqa: ANN001
    browser, live_server, student, teacher, transactional_db,
) -> None:
    from accounts.services import key_issue

    worker = worker_register(name="it-worker", base_url="http://127.0.0.1:9/", model_id="smollm2-135m-instruct",
                             pool_name="production", slots=4, context_length=4096, state="healthy")
    key, _ = key_issue(user=student, name="laptop")
    log_request(user=student, key=key, worker=worker, client="ollama", user_agent=COPILOT_AGENT)
    # A "Not yet" message from a step check must show once, and the verdicts must be readable too.
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {}
    for label, viewport in (("phone", PHONE), ("laptop", LAPTOP)):
        for who, pages in ((student, STUDENT_PAGES), (teacher, TEACHER_PAGES)):
            context = signed_in_context(browser, live_server, who, viewport=viewport)
            page = context.new_page()
            for path in pages:
                page.goto(f"{live_server.url}{path}")
                name = f"{who.username}{path.replace('/', '-').rstrip('-')}-{label}"
                page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
                if found := page_problems(page):
                    problems[name] = found
                if path in LESSON_PAGES:
                    body = page.locator("#lesson-body").inner_text()
                    for placeholder in ("HOST/", "\"MODEL\"", "=MODEL"):
                        if placeholder in body:
                            problems.setdefault(name, []).append(f"recipe still says {placeholder}")
            context.close()
    assert not problems, "\n" + "\n".join(f"{name}: {found}" for name, found in problems.items())


def test_a_not_yet_message_shows_once(browser, live_server, student, transactional_db) -> None:  # noqa: ANN001
    context = signed_in_context(browser, live_server, student, viewport=PHONE)
    page = context.new_page()
    page.goto(f"{live_server.url}/lessons/editors/")
    page.click("#check-first-editor-request")
    assert page.get_by_text("Not yet:").count() == 1
    assert not page_problems(page)
    context.close()
