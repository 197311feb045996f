"""The chat page (issue 51) in Chromium, against the real gateway: with the real llama-server (a
conversation streamed, stopped, kept in the browser, deleted; keyboard only; axe at both widths in
both themes) and with a stand-in worker that answers exactly what a hostile model would (rendered
as text), beside the refusals a student reads (a pause's note, a spent budget, a disabled
account) and a page of another origin that tries the key."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import LAPTOP, PHONE, SCREENSHOTS, page_problems, sign_in
from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID, wait_for

pytestmark = pytest.mark.integration

HOSTILE = ('Look: <img src=x onerror="window.__pwned=1"> and [click me](javascript:window.__pwned=2).\n\n'
           '<script>window.__pwned=3</script>\n\n'
           '```html\n<script>window.__pwned=4</script>\n```\n\n'
           'A [safe link](https://example.org/) and **bold**.')
STAND_IN = "stand-in-hostile"
KEY_CACHE_S = 1.5  # a change made in this test process reaches the gateway's key cache (KEY_CACHE_TTL_S: 1 s)


def answer_done(page: Any) -> None:
    expect(page.locator("#chat-stop")).to_be_hidden(timeout=120_000)


def chat_rows(student: Any) -> list[dict[str, Any]]:
    from inference.models import RequestLog

    return list(RequestLog.objects.filter(user=student, tool="chat").order_by("at").values())


def test_a_student_chats_stops_reloads_and_deletes_with_the_keyboard(gateway, worker, taught_class, student, teacher,
                                                                     new_page) -> None:  # noqa: ANN001
    from accounts.services import user_ensure

    page = new_page()
    sign_in(page, gateway.url, "alice", "pw-alice-1")
    page.goto(f"{gateway.url}/chat/")
    page.select_option("#chat-model", MODEL_ID)
    expect(page.locator("#chat-model-about")).to_contain_text("tokens of context")

    # The turn to stop must still be streaming when Stop reaches the gateway, else it is rightly
    # logged as answered (200). The model samples, and now and then it counts in one short line,
    # so this turn (and only this one) asks the worker for 3,000 tokens whatever the model says:
    # the page's request gets llama-server's `ignore_eos` on its way out of the browser.
    lengthened: list[str] = []

    def long_answer(route) -> None:  # noqa: ANN001
        body = json.loads(route.request.post_data or "{}")
        lengthened.append(body.get("model", ""))
        route.continue_(post_data=json.dumps({**body, "max_tokens": 3000, "ignore_eos": True}))
    chat_route = page.locator("#chat").get_attribute("data-route") or ""
    page.route(f"**{chat_route}", long_answer)

    # Keyboard only: type, Enter sends, Tab reaches Stop while it streams, Enter stops.
    page.locator("#chat-input").focus()
    page.keyboard.type("Write the numbers from 1 to 300, separated by commas.")
    page.keyboard.press("Enter")
    answer = page.locator(".chat-msg.assistant .chat-body").last
    expect(page.locator("#chat-stop")).to_be_visible()
    lengths: set[int] = set()

    def streaming() -> bool:
        lengths.add(len(answer.text_content() or ""))
        return len(lengths - {0}) >= 2
    assert wait_for(streaming, timeout_s=60), "the answer did not stream"
    page.unroute(f"**{chat_route}")
    assert lengthened == [MODEL_ID]  # this turn, and only it, was asked for the long answer
    page.locator("#chat-input").focus()
    page.keyboard.press("Tab")
    expect(page.locator("#chat-stop")).to_be_focused()
    page.keyboard.press("Enter")
    answer_done(page)
    expect(page.locator(".chat-note").last).to_have_text("Stopped.")

    # The slot is freed at once: the fleet view and the worker's own slots agree.
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    fleet = new_page()
    sign_in(fleet, gateway.url, "teacher", "pw-teacher-1")
    fleet.goto(f"{gateway.url}/teacher/fleet/")

    def worker_idle() -> bool:
        slots = httpx.get(f"{worker.base_url}/slots", timeout=5,
                          headers={"Authorization": f"Bearer {FIXTURE_WORKER_KEY}"}).json()
        busy = fleet.locator("tr", has_text="it-worker").locator("td").nth(5).text_content() or ""
        return not any(slot["is_processing"] for slot in slots) and busy.startswith("0 /")
    assert wait_for(worker_idle, timeout_s=10, interval_s=0.2)

    # The teacher's view of it: the class page's chat share and switch; a teacher of another
    # class gets 404 for it, and chats on their own page.
    fleet.emulate_media(color_scheme="dark")
    fleet.goto(f"{gateway.url}/teacher/classes/{taught_class.id}/")
    expect(fleet.locator("#chat-share")).to_contain_text("came from the chat page")
    assert page_problems(fleet) == []
    fleet.screenshot(path=str(SCREENSHOTS / "chat-teacher-class-dark.png"), full_page=True)
    fleet.goto(f"{gateway.url}/chat/")
    fleet.set_viewport_size(PHONE)
    fleet.screenshot(path=str(SCREENSHOTS / "chat-teacher-phone-dark.png"), full_page=True)
    user_ensure(username="turing", role="teacher", password="pw-turing-1")
    stranger = new_page(viewport=PHONE)
    sign_in(stranger, gateway.url, "turing", "pw-turing-1")
    assert stranger.goto(f"{gateway.url}/teacher/classes/{taught_class.id}/").status == 404
    stranger.goto(f"{gateway.url}/chat/")
    stranger.screenshot(path=str(SCREENSHOTS / "chat-other-teacher-phone.png"), full_page=True)

    # A second conversation, then back to the first, by keyboard.
    page.locator("#chat-new").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#chat-input")).to_be_focused()
    page.keyboard.type("Say hello.")
    page.keyboard.press("Enter")
    answer_done(page)
    assert (page.locator(".chat-msg.assistant .chat-body").last.text_content() or "").strip()
    page.locator(".chat-open", has_text="Write the numbers").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#chat-title")).to_contain_text("Write the numbers")

    # Reloaded: both conversations come back from the browser's storage.
    page.reload()
    expect(page.locator(".chat-open")).to_have_count(2)
    expect(page.locator(".chat-msg.user").first).to_contain_text("numbers from 1 to 300")

    # The request log holds the turns as alice's, from the chat page, and none of the text.
    assert wait_for(lambda: len(chat_rows(student)) >= 2, timeout_s=20, interval_s=0.3)
    rows = chat_rows(student)
    assert {row["status"] for row in rows} == {200, 499} and all(row["model"] == MODEL_ID for row in rows)
    stored = json.dumps(rows, default=str)
    assert "numbers from 1" not in stored and "Say hello" not in stored

    # Laptop and phone, light and dark: nothing serious for axe, no sideways scroll.
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for name, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
            page.set_viewport_size(viewport)
            assert page_problems(page) == [], (scheme, name)
            page.screenshot(path=str(SCREENSHOTS / f"chat-{name}-{scheme}.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(LAPTOP)

    # Delete all: one click (and a confirmation), gone from the browser too.
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#chat-delete-all")
    expect(page.locator(".chat-open")).to_have_count(0)
    page.reload()
    expect(page.locator("#chat-list-empty")).to_be_visible()
    assert page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('ocs-chat'))") == []


class _StandIn(BaseHTTPRequestHandler):
    """A worker that answers every chat with HOSTILE, streamed as llama-server streams; and, at
    /evil, a page of another origin that tries the chat page's key."""

    protocol_version = "HTTP/1.1"
    gateway_url = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002, ANN401
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/evil":
            self._send(200, b"<!doctype html><title>elsewhere</title>", "text/html")
        elif self.path == "/health":
            self._send(200, b'{"status":"ok"}', "application/json")
        else:
            self._send(404, b"{}", "application/json")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions" or not body.get("stream"):
            self._send(404, b"{}", "application/json")
            return
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": STAND_IN}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": HOSTILE[:40]}, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {"content": HOSTILE[40:]}, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 60, "total_tokens": 72}},
        ]
        payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self._send(200, payload, "text/event-stream")


@pytest.fixture
def stand_in(transactional_db) -> Iterator[Any]:  # noqa: ANN001
    """The stand-in worker, registered as the only worker of STAND_IN."""
    from fleet.services import worker_register

    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    worker_register(name="stand-in", base_url=url, model_id=STAND_IN, pool_name="production", slots=2,
                    context_length=4096, state="healthy")
    yield url
    server.shutdown()


def send(page: Any, text: str) -> None:
    page.fill("#chat-input", text)
    page.click("#chat-send")
    answer_done(page)


def test_a_hostile_answer_is_only_text_and_refusals_say_why(gateway, stand_in, taught_class, student, teacher,
                                                            new_page) -> None:  # noqa: ANN001
    from accounts.services import class_pause, class_resume, limits_set, user_set_active

    page = new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, gateway.url, "alice", "pw-alice-1")
    page.goto(f"{gateway.url}/chat/")
    page.select_option("#chat-model", STAND_IN)
    send(page, "Hello")
    body = page.locator(".chat-msg.assistant .chat-body").last
    expect(body).to_contain_text('<img src=x onerror="window.__pwned=1">')
    expect(body).to_contain_text("[click me](javascript:window.__pwned=2)")
    expect(body).to_contain_text("<script>window.__pwned=3</script>")
    expect(body.locator("pre code")).to_have_text("<script>window.__pwned=4</script>")
    assert body.locator("img, script, iframe, [onerror]").count() == 0
    assert body.locator("a").evaluate_all("links => links.map(a => a.href)") == ["https://example.org/"]
    assert page.evaluate("window.__pwned") is None and errors == []
    expect(body.locator("button.code-copy")).to_have_count(1)

    # Another origin (same site, another port): its fetch with the page's header is stopped by
    # the browser (no CORS grant); without the header the gateway refuses it; nothing is served.
    assert wait_for(lambda: len(chat_rows(student)) == 1, timeout_s=20, interval_s=0.3)
    other = page.context.new_page()
    other.goto(f"{stand_in}/evil")
    outcome = other.evaluate("""async (route) => {
        const body = JSON.stringify({model: "%s", messages: [{role: "user", content: "hi"}]});
        let withHeader = "sent";
        try { await fetch(route, {method: "POST", credentials: "include", body,
                                  headers: {"Content-Type": "application/json", "X-OCS-Chat": "1"}}); }
        catch (e) { withHeader = "blocked"; }
        await fetch(route, {method: "POST", mode: "no-cors", credentials: "include", body});
        return withHeader;
    }""" % STAND_IN, f"{gateway.url}/chat/v1/chat/completions")
    assert outcome == "blocked"
    other.close()

    # A paused class: the teacher's note, plainly.
    class_pause(classroom=taught_class, actor=teacher, message="Maths exam until the bell")
    time.sleep(KEY_CACHE_S)
    send(page, "Are you there?")
    expect(page.locator("#chat-problem")).to_contain_text("Your class is paused.")
    expect(page.locator("#chat-problem")).to_contain_text("Maths exam until the bell")
    class_resume(classroom=taught_class, actor=teacher)

    # A spent budget: what is left and when it resets.
    limits_set(target=student, tokens_per_day=10)
    time.sleep(KEY_CACHE_S)
    page.click("#chat-regenerate")  # "Send again": the last message had no answer
    answer_done(page)
    expect(page.locator("#chat-problem")).to_contain_text("Your token budget is used up.")
    expect(page.locator("#chat-problem")).to_contain_text("resets")
    limits_set(target=student, tokens_per_day=None)

    # Disabled while the page is open: refused on the next message.
    user_set_active(user=student, active=False)
    time.sleep(KEY_CACHE_S)
    page.click("#chat-regenerate")
    answer_done(page)
    expect(page.locator("#chat-problem")).to_contain_text("Your account is disabled.")
    # Every refusal logged as alice's, from the chat page; the other origin's tries never served.
    assert wait_for(lambda: len(chat_rows(student)) == 4, timeout_s=20, interval_s=0.3)
    assert [(row["status"], row["error_code"]) for row in chat_rows(student)] == [
        (200, ""), (403, "class_paused"), (429, "tokens_per_day_exceeded"), (403, "account_disabled")]
