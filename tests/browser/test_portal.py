"""A student and the teacher in a real browser, against the real gateway and llama-server."""
from __future__ import annotations

import re
from typing import Any

import openai
import pytest

from tests.browser.conftest import LAPTOP, PHONE, SCREENSHOTS, sign_in
from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID, wait_for

pytestmark = pytest.mark.integration


def ask(base_url: str, key: str) -> str:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=120)
    reply = client.chat.completions.create(model=MODEL_ID, max_tokens=8,
                                           messages=[{"role": "user", "content": "Say hi"}])
    return reply.choices[0].message.content or ""


def test_student_creates_key_uses_it_sees_usage_and_revokes_it(gateway, worker, student, new_page) -> None:  # noqa: ANN001
    page = new_page(permissions=["clipboard-read", "clipboard-write"])
    sign_in(page, gateway.url, "alice", "pw-alice-1")
    page.goto(f"{gateway.url}/keys/")
    page.fill("input[name=name]", "browser")
    page.click("text=Create key")
    raw = page.get_by_test_id("new-key").inner_text().strip()
    assert re.fullmatch(r"ocs-[a-z0-9]{10}-[A-Za-z0-9]{40}", raw)
    page.click("text=Copy key")
    assert page.evaluate("navigator.clipboard.readText()") == raw

    # The connect page picks the new key up in this tab and its test button makes a real request.
    page.goto(f"{gateway.url}/connect/")
    assert page.input_value("#connect-key") == raw
    assert raw in (page.text_content("#snip-curl") or "")
    page.click("#test-key")
    page.wait_for_selector("#test-result.ok", timeout=120_000)
    assert "It works" in page.inner_text("#test-result")

    assert ask(gateway.url, raw) is not None

    def usage_lists_requests() -> bool:
        page.goto(f"{gateway.url}/usage/")
        return page.locator("#recent-requests tbody tr", has_text=MODEL_ID).count() >= 2
    assert wait_for(usage_lists_requests, timeout_s=20, interval_s=0.5), page.inner_text("#recent-requests")

    page.goto(f"{gateway.url}/keys/")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("button[aria-label^='Revoke key browser']")
    page.wait_for_selector("text=is revoked")
    with pytest.raises(openai.AuthenticationError):
        ask(gateway.url, raw)


def test_teacher_imports_three_students_and_one_signs_in_with_the_link(gateway, worker, teacher, new_page,
                                                                       tmp_path) -> None:  # noqa: ANN001
    csv_file = tmp_path / "class.csv"
    csv_file.write_text("username,email,name\nfay,fay@school.example,Fay Lee\ngus,,Gus\nhal,,Hal Roe\n")
    page = new_page()
    sign_in(page, gateway.url, "teacher", "pw-teacher-1")
    page.goto(f"{gateway.url}/teacher/import/")
    page.set_input_files("input[type=file]", str(csv_file))
    page.fill("input[name=classroom]", "7C")
    page.click("button:has-text('Import')")
    links = {code.get_attribute("data-username"): code.inner_text() for code in page.locator("code.link").all()}
    assert sorted(links) == ["fay", "gus", "hal"]

    student_page = new_page(viewport=PHONE)
    student_page.goto(links["gus"])
    student_page.fill("input[name=new_password1]", "gus-picks-a-good-one-9")
    student_page.fill("input[name=new_password2]", "gus-picks-a-good-one-9")
    student_page.click("button:has-text('Save and sign in')")
    student_page.wait_for_url(f"{gateway.url}/")
    student_page.goto(f"{gateway.url}/keys/")
    student_page.click("text=Create key")
    raw = student_page.get_by_test_id("new-key").inner_text().strip()
    assert ask(gateway.url, raw) is not None


def test_fleet_view_updates_without_reload_when_a_worker_dies_and_returns(
        gateway, worker, teacher, spare_llama_servers, monitor, new_page) -> None:  # noqa: ANN001
    from fleet.services import worker_register

    spare = spare_llama_servers()
    spare_worker = worker_register(name="spare", base_url=spare.spec.base_url, model_id=MODEL_ID,
                                   pool_name="production", slots=4, context_length=4096, state="healthy",
                                   api_key=FIXTURE_WORKER_KEY)
    spare_worker.slot_files_pruned = 5  # as its rig agent's heartbeat says
    spare_worker.save(update_fields=["slot_files_pruned"])
    page = new_page()
    sign_in(page, gateway.url, "teacher", "pw-teacher-1")
    page.goto(f"{gateway.url}/teacher/fleet/")
    page.wait_for_selector("#live.on")
    page.wait_for_selector('tr[data-worker="spare"][data-state="healthy"]')
    assert "5 slot files pruned" in page.inner_text('tr[data-worker="spare"] [data-testid="pruned"]')
    page.evaluate("window.notReloaded = true")

    spare.stop()
    page.wait_for_selector('tr[data-worker="spare"][data-state="down"]', timeout=60_000)
    spare_llama_servers(port=spare.spec.port)
    page.wait_for_selector('tr[data-worker="spare"][data-state="healthy"]', timeout=120_000)
    assert page.evaluate("window.notReloaded") is True
    assert "spare" in page.inner_text("#events")


STUDENT_PAGES = ["/", "/keys/", "/usage/", "/connect/"]
TEACHER_PAGES = ["/teacher/", "/teacher/import/", "/teacher/usage/", "/teacher/requests/", "/teacher/fleet/"]


def _violations(page: Any) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
            for v in results.response["violations"] if v["impact"] in {"serious", "critical"}]


@pytest.mark.backend_neutral  # what a page looks like does not depend on the back end: once, in the embedded pass
def test_main_pages_have_no_serious_accessibility_violations_and_screenshots(
        gateway, worker, teacher, student, taught_class, new_page) -> None:  # noqa: ANN001
    """Each main page at laptop and phone widths: axe-core finds nothing serious or critical;
    screenshots go to var/screenshots/ (test artifacts, not committed)."""
    from accounts.services import key_issue
    from tests.portal.test_pages import log_request

    key, _ = key_issue(user=student, name="laptop")
    for model, status in (("smollm2-135m-instruct", 200), ("smollm2-135m-instruct", 429)):
        log_request(student, key, model=model, status=status)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {}

    def check(page: Any, name: str, label: str) -> None:
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{label}.png"), full_page=True)
        if found := _violations(page):
            problems[f"{name} {label}"] = found
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        if overflow > 0:
            problems[f"{name} {label}"] = [*problems.get(f"{name} {label}", []), f"page scrolls sideways by {overflow}px"]

    for label, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
        page = new_page(viewport=viewport)
        page.goto(f"{gateway.url}/accounts/login/")
        check(page, "login", label)
        sign_in(page, gateway.url, "alice", "pw-alice-1")
        for path in STUDENT_PAGES:
            page.goto(f"{gateway.url}{path}")
            check(page, path.strip("/") or "home", label)
        page.goto(f"{gateway.url}/keys/")
        page.click("text=Create key")
        check(page, "new-key", label)
        teacher_page = new_page(viewport=viewport)
        sign_in(teacher_page, gateway.url, "teacher", "pw-teacher-1")
        for path in TEACHER_PAGES:
            teacher_page.goto(f"{gateway.url}{path}")
            if path == "/teacher/fleet/":
                teacher_page.wait_for_selector("#live.on")
            check(teacher_page, path.strip("/").replace("/", "-"), label)
        teacher_page.goto(f"{gateway.url}/teacher/students/{student.id}/")
        check(teacher_page, "teacher-student", label)
    assert not problems, problems
