"""Browser tests: Playwright drives Debian's Chromium (/usr/bin/chromium, installed by
scripts/ensure_browser.sh), headless, against the session's real gateway and llama-server.
Playwright never downloads a browser here."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parent.parent.parent / "var" / "screenshots"
LAPTOP = {"width": 1366, "height": 860}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module", autouse=True)
def _sync_orm_beside_playwright() -> Iterator[None]:
    """Playwright's sync API keeps an event loop running in this thread, so Django takes the
    tests' own ORM calls (plain synchronous reads and writes between browser steps, and the
    database flush after each test) for calls from async code. Allowed for the browser modules
    only, from before their browser starts until after it closes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is missing: run scripts/ensure_browser.sh (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield chromium
        chromium.close()


@pytest.fixture
def new_page(browser: Any) -> Iterator[Any]:
    """new_page(viewport=LAPTOP) -> a page in a fresh context (its own cookies); all closed after."""
    contexts: list[Any] = []

    def make(viewport: dict[str, int] = LAPTOP, **options: Any) -> Any:
        context = browser.new_context(viewport=viewport, **options)
        context.set_default_timeout(30_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


def sign_in(page: Any, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: url in (f"{base_url}/", f"{base_url}/teacher/"))  # a teacher lands on /teacher/


def signed_in_context(browser: Any, live_server: Any, user: Any, viewport: dict[str, int] | None = None) -> Any:
    """A browser context (laptop-sized unless `viewport` says otherwise) carrying `user`'s
    session cookie, from a session created by Django's test client."""
    from django.conf import settings
    from django.test import Client

    test_client = Client()
    test_client.force_login(user)
    context = browser.new_context(viewport=viewport or {"width": 1366, "height": 900})
    context.set_default_timeout(30_000)
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "url": live_server.url,
                          "value": test_client.cookies[settings.SESSION_COOKIE_NAME].value}])
    return context


def page_problems(page: Any) -> list[str]:
    """What axe-core finds serious or critical on the page, and a sideways scroll."""
    from axe_playwright_python.sync_playwright import Axe

    found = [f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
             for v in Axe().run(page).response["violations"] if v["impact"] in {"serious", "critical"}]
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    if overflow > 0:
        found.append(f"page scrolls sideways by {overflow}px")
    return found
