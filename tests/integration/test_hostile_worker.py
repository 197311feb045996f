"""A worker that misbehaves (a bug, a crash, a compromised rig) never gets a 5xx-with-traceback,
a hang or a leaked slot out of the gateway: the client gets a clean error in its own format, the
request log says what happened, and the worker's slot is free again.

The fake worker is a loopback server whose misbehaviour is chosen by the first path segment of
the worker's base URL (each case registers its own worker and model)."""
from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from fleet.local_worker import free_port
from tests.conftest import Gateway, start_gateway, stop_process, wait_for

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 2.0
MAX_STREAM_S = 4.0


def _chunk(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}).encode() + b"\n\n"


def _anthropic(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


async def _misbehave(mode: str, stream: bool, writer: asyncio.StreamWriter, path: str = "") -> None:
    def head(status: int = 200, kind: str = "text/event-stream") -> None:
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nConnection: close\r\n\r\n".encode())

    if mode == "not-json":
        head(kind="application/json")
        writer.write(b"<html>definitely not json</html>")
    elif mode == "no-terminator":
        head()
        writer.write(b"data: {\"choices\": [{\"delta\": {\"content\": \"hal")  # no blank line, ever
    elif mode == "endless":
        head()
        while True:
            writer.write(_chunk("more "))
            await writer.drain()
            await asyncio.sleep(0.05)
    elif mode == "stall-under":
        head()
        writer.write(_chunk("first "))
        await writer.drain()
        await asyncio.sleep(READ_TIMEOUT_S * 0.6)
        writer.write(_chunk("second") + b"data: [DONE]\n\n")
    elif mode == "stall-over":
        head()
        writer.write(_chunk("first "))
        await writer.drain()
        await asyncio.sleep(READ_TIMEOUT_S * 3)
    elif mode == "huge-error":
        head(400, "application/json")
        writer.write(b'{"error": {"message": "' + b"x" * (8 * 1024 * 1024) + b'"}}')
    elif mode == "error-mid-stream":
        head()
        writer.write(_chunk("partial ") + b'data: {"error": {"code": 500, "message": "context shift failed", '
                                           b'"type": "server_error"}}\n\n')
    elif mode == "hold" and path.endswith("/v1/messages"):  # the same, in Anthropic's events
        head()
        writer.write(_anthropic("message_start", {"message": {"id": "msg_1", "role": "assistant", "content": []}})
                     + _anthropic("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
                     + _anthropic("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "held"}}))
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.write(_anthropic("content_block_stop", {"index": 0})
                     + _anthropic("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})
                     + _anthropic("message_stop", {}))
    elif mode == "hold":  # a slow but healthy answer: comments for a while, then the end
        head()
        writer.write(_chunk("holding "))
        for _ in range(int(MAX_STREAM_S / 0.5) - 2):
            await writer.drain()
            await asyncio.sleep(0.5)
            writer.write(b": still thinking\n\n")
        writer.write(b"data: [DONE]\n\n")
    elif mode == "cut":
        head()
        writer.write(_chunk("half an answer"))  # then the connection closes, no [DONE]
    await writer.drain()


class HostileWorker:
    def __init__(self) -> None:
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                request_line = (await reader.readline()).decode()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                path = request_line.split()[1]
                await _misbehave(path.split("/")[1], bool(body.get("stream")), writer, path)
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        server = self.loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()
        server.close()

    def start(self) -> "HostileWorker":
        self.thread.start()
        self.ready.wait(5)
        return self


@pytest.fixture(scope="module")
def hostile() -> HostileWorker:
    return HostileWorker().start()


@pytest.fixture(scope="module")
def strict_gateway(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Gateway]:  # noqa: ANN001
    """A gateway with short worker timeouts, so a stall or an endless stream shows in seconds."""
    with django_db_blocker.unblock():
        running = start_gateway(tmp_path_factory.mktemp("strict") / "gateway.log",
                                OCS_UPSTREAM_READ_TIMEOUT_S=str(READ_TIMEOUT_S),
                                OCS_UPSTREAM_MAX_STREAM_S=str(MAX_STREAM_S), OCS_UPSTREAM_MAX_TRIES="1",
                                OCS_QUEUE_MAX_WAIT_S="3")
    yield running
    stop_process(running.process)


def _register(hostile: HostileWorker, mode: str) -> str:
    from fleet.services import worker_register

    model = f"hostile-{mode}"
    worker_register(name=model, base_url=f"http://127.0.0.1:{hostile.port}/{mode}", model_id=model,
                    pool_name="production", slots=1, context_length=4096, state="healthy")
    return model


def _busy(gateway: Gateway, worker: str) -> float:
    text = httpx.get(gateway.url + "/metrics", timeout=10).text
    match = re.search(rf'ocs_worker_busy_slots{{pool="production",worker="{re.escape(worker)}"}} ([0-9.]+)', text)
    assert match, text[-500:]
    return float(match.group(1))


def _row(model: str):  # noqa: ANN202
    from inference.models import RequestLog

    return wait_for(lambda: RequestLog.objects.filter(model=model).order_by("-id").first(), 10)


def _post(gateway: Gateway, key: str, model: str, *, stream: bool, path: str = "/v1/chat/completions") -> httpx.Response:
    body = {"model": model, "stream": stream, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", gateway.url + path, json=body, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as response:
        response.read()
    return response


def _stream_events(response: httpx.Response) -> list[dict]:
    """The stream's complete JSON events (a worker cut off mid-event leaves a broken one behind,
    which the gateway cannot take back; the error event after it is whole)."""
    events = []
    for line in response.text.split("\n"):
        if line.startswith("data: {"):
            try:
                events.append(json.loads(line[6:]))
            except ValueError:
                pass
    return events


@pytest.mark.parametrize("mode", ["not-json", "huge-error"])
def test_a_broken_whole_answer_is_a_clean_error_and_frees_the_slot(strict_gateway, hostile, student_key, mode) -> None:  # noqa: ANN001
    model = _register(hostile, mode)
    started = time.monotonic()
    answer = _post(strict_gateway, student_key[1], model, stream=False)
    assert answer.status_code in {400, 502}, answer.text[:300]
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and len(answer.content) < 70_000
    assert time.monotonic() - started < 60
    assert _busy(strict_gateway, model) == 0
    assert _row(model).status == answer.status_code


@pytest.mark.parametrize(("mode", "ends_ok"), [
    ("no-terminator", False), ("endless", False), ("stall-over", False), ("error-mid-stream", False), ("cut", False),
    ("stall-under", True),
])
def test_a_misbehaving_stream_ends_cleanly_and_frees_the_slot(strict_gateway, hostile, student_key, mode, ends_ok) -> None:  # noqa: ANN001
    model = _register(hostile, mode)
    answer = _post(strict_gateway, student_key[1], model, stream=True)
    assert answer.status_code == 200
    events = _stream_events(answer)
    errors = [e for e in events if "error" in e]
    if ends_ok:
        assert not errors and answer.text.rstrip().endswith("data: [DONE]")
        assert "".join(e["choices"][0]["delta"]["content"] for e in events) == "first second"
    else:
        assert errors, answer.text[-300:]  # the client is told, in OpenAI's chunk format
        assert errors[-1]["error"]["message"]
    assert wait_for(lambda: _busy(strict_gateway, model) == 0, 10)
    row = _row(model)
    assert row.status == 200 and (row.error_code == "") == ends_ok


def test_an_anthropic_client_gets_an_error_event_from_a_worker_cut_short(strict_gateway, hostile, student_key) -> None:  # noqa: ANN001
    model = _register(hostile, "cut")
    body = {"model": model, "stream": True, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", strict_gateway.url + "/v1/messages", json=body, timeout=60,
                      headers={"x-api-key": student_key[1]}) as answer:
        text = answer.read().decode()
    assert answer.status_code == 200
    assert "event: error" in text and '"type": "error"' in text
    assert _busy(strict_gateway, model) == 0


def test_a_responses_client_gets_response_failed_from_a_worker_cut_short(strict_gateway, hostile, student_key) -> None:  # noqa: ANN001
    model = _register(hostile, "cut")
    body = {"model": model, "stream": True, "input": "hi"}
    with httpx.stream("POST", strict_gateway.url + "/v1/responses", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {student_key[1]}"}) as answer:
        kinds = [json.loads(line[6:])["type"] for line in answer.read().decode().split("\n")
                 if line.startswith("data: {")]
    assert kinds[0] == "response.created" and "error" in kinds and "response.completed" not in kinds


def test_leaving_while_queued_during_keepalives_frees_the_queue_and_the_slot(strict_gateway, hostile, student_key) -> None:  # noqa: ANN001
    from inference.models import RequestLog

    model = _register(hostile, "hold")
    headers = {"Authorization": f"Bearer {student_key[1]}", "User-Agent": f"queued-{time.monotonic_ns()}"}
    body = {"model": model, "stream": True, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", strict_gateway.url + "/v1/chat/completions", json=body, headers=headers,
                      timeout=60) as holder:
        held = holder.iter_raw()  # kept: a dropped iterator closes the connection
        assert b"data:" in next(held)  # the only slot is held from here on
        with httpx.stream("POST", strict_gateway.url + "/v1/chat/completions", json=body, headers=headers,
                          timeout=60) as waiting:
            assert waiting.status_code == 200  # past the grace period: the stream starts with keep-alives
            waited = waiting.iter_raw()
            assert next(waited).startswith(b":")
        # the waiting student left; the holder leaves too
    assert wait_for(lambda: _busy(strict_gateway, model) == 0, 10)
    mine = RequestLog.objects.filter(user_agent=headers["User-Agent"])
    assert wait_for(lambda: mine.count() >= 2, 10)
    rows = list(mine)
    assert len(rows) == 2 and all(row.status == 499 for row in rows)
    left_while_queued = [row for row in rows if not row.worker_name]
    assert len(left_while_queued) == 1 and left_while_queued[0].queue_wait_ms > 0
    queue = httpx.get(strict_gateway.url + "/metrics", timeout=10).text
    assert not re.search(rf'ocs_queue_depth{{pool_model="[0-9]+:{model}"}} [1-9]', queue)


def test_leaving_at_the_first_byte_frees_the_slot_and_logs_499(strict_gateway, hostile, student_key) -> None:  # noqa: ANN001
    """A student who closes the tab as the answer starts: the slot comes back at once, and the
    request log says 499 with what was delivered (its worker and TTFT), not 200."""
    from inference.models import RequestLog

    model = _register(hostile, "hold")
    headers = {"Authorization": f"Bearer {student_key[1]}", "User-Agent": f"first-byte-{time.monotonic_ns()}"}
    body = {"model": model, "stream": True, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):  # one slot: a leaked one would leave the next request queued for good
        with httpx.stream("POST", strict_gateway.url + "/v1/chat/completions", json=body, headers=headers,
                          timeout=60) as answer:
            assert b"data:" in next(answer.iter_raw())
    assert wait_for(lambda: _busy(strict_gateway, model) == 0, 10)
    mine = RequestLog.objects.filter(user_agent=headers["User-Agent"])
    assert wait_for(lambda: mine.count() >= 3, 10)
    rows = list(mine)
    assert [(r.status, r.error_code, r.worker_name, r.ttft_ms is not None) for r in rows] == [
        (499, "client_closed", model, True)] * 3


def test_a_queued_anthropic_stream_gets_ping_events_then_its_answer(strict_gateway, hostile, student_key) -> None:  # noqa: ANN001
    """Claude Code gives up after 300 s of silence: while its request waits for a slot, the
    stream carries Anthropic `ping` events, then the whole answer."""
    model = _register(hostile, "hold")
    chat = {"model": model, "stream": True, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", strict_gateway.url + "/v1/chat/completions", json=chat, timeout=60,
                      headers={"Authorization": f"Bearer {student_key[1]}"}) as holder:
        held = holder.iter_raw()  # kept: a dropped iterator closes the connection
        assert b"data:" in next(held)  # the only slot is taken
        events: list[str] = []
        body = {"model": model, "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.stream("POST", strict_gateway.url + "/v1/messages", json=body, timeout=60,
                          headers={"x-api-key": student_key[1]}) as answer:
            assert answer.status_code == 200
            for line in answer.iter_lines():
                if line.startswith("event: "):
                    events.append(line[7:])
                    if events.count("ping") == 2:
                        holder.close()  # the slot comes free: the queued request is served
    assert events[:2] == ["ping", "ping"]
    assert events[events.index("message_start"):] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]


def test_a_worker_that_dies_mid_answer_leaves_a_row_with_what_was_relayed_marked_estimated(
        strict_gateway, hostile, student_key) -> None:  # noqa: ANN001
    """The worker relays one token and its connection drops: the client got one token; the row
    says 1 completion token and the prompt by the byte estimate, marked estimated (it used to say
    0 / 0, and the budget kept the whole reservation)."""
    from inference.admission.rules import prompt_tokens_estimate

    model = _register(hostile, "cut")
    body = json.dumps({"model": model, "stream": True, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hi there, worker"}]}).encode()
    with httpx.stream("POST", strict_gateway.url + "/v1/chat/completions", content=body, timeout=60,
                      headers={"Authorization": f"Bearer {student_key[1]}", "Content-Type": "application/json"}) as answer:
        text = answer.read().decode()
    assert text.count('"content": "half an answer"') == 1
    row = _row(model)
    assert (row.status, row.error_code, row.usage_estimated) == (200, "upstream_error", True)
    assert (row.prompt_tokens, row.completion_tokens) == (prompt_tokens_estimate(len(body)), 1)
