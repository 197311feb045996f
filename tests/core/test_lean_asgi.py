"""The lean path's ASGI application (core/lean_asgi.py), driven as an ASGI server drives it: a
client that leaves cancels its request's handler at once, a stream cut off mid-send is closed
before the request is over (not left for garbage collection, whose clean-up a stopping server
never runs), a server that stops lets the handler unwind, and a handler's bug is answered."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.api_http import Headers, Request, Response, json_response
from core.lean_asgi import LeanApp, Routes

SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
         "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "root_path": "", "query_string": b"",
         "headers": [(b"authorization", b"Bearer k"), (b"x-tag", b"a"), (b"X-Tag", b"b")],
         "client": ("10.1.2.3", 50000), "server": ("127.0.0.1", 8000)}


class Body:
    """A stream's body that never ends by itself; `finished` says whether its clean-up ran."""

    def __init__(self) -> None:
        self.finished = False

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"data: {}\n\n"
        finally:
            self.finished = True


async def not_ours(scope: Any, receive: Any, send: Any) -> None:  # noqa: ANN401
    await send({"type": "http.response.start", "status": 299, "headers": []})
    await send({"type": "http.response.body", "body": b"django"})


def on_error(request: Request, exc: Exception) -> Response:
    return json_response({"error": {"message": f"internal error on {request.path}"}}, status=500)


def app(*routes: tuple[str, Any]) -> LeanApp:
    return LeanApp(Routes({}, routes), on_error=on_error, fallback=not_ours)


async def call(application: LeanApp, scope: dict[str, Any], parts: list[bytes]) -> list[dict[str, Any]]:
    """One request whose body comes in `parts`; the messages sent back."""
    messages = [{"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await application(scope, receive, send)
    return sent


def test_routes_params_request_and_a_plain_answer_with_its_length() -> None:
    seen: dict[str, Any] = {}

    async def handler(request: Request, key: str) -> Response:
        seen.update(key=key, body=request.body, peer=request.peer, auth=request.headers["AUTHORIZATION"],
                    tag=request.headers.get("x-tag"), method=request.method)
        response = json_response({"ok": True}, status=201)
        response["X-Request-Id"] = "r1"
        return response

    application = app((r"/ollama/(?P<key>[^/]+)/api/show", handler))
    sent = asyncio.run(call(application, {**SCOPE, "path": "/ollama/abc/api/show"}, [b'{"a"', b": 1}"]))
    assert seen == {"key": "abc", "body": b'{"a": 1}', "peer": "10.1.2.3", "auth": "Bearer k", "tag": "a, b",
                    "method": "POST"}
    start, body = sent
    assert start["status"] == 201
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json" and headers[b"x-request-id"] == b"r1"
    assert headers[b"content-length"] == str(len(body["body"])).encode() and body["body"] == b'{"ok": true}'
    assert not body.get("more_body", False)


def test_a_path_it_does_not_serve_goes_to_the_fallback_untouched() -> None:
    sent = asyncio.run(call(app(), {**SCOPE, "path": "/teacher/"}, [b""]))
    assert sent[0]["status"] == 299 and sent[1]["body"] == b"django"


def test_a_handlers_bug_is_answered_by_on_error() -> None:
    async def broken(request: Request) -> Response:
        raise RuntimeError("a bug")

    sent = asyncio.run(call(LeanApp(Routes({"/v1/models": broken}), on_error=on_error, fallback=not_ours),
                            {**SCOPE, "path": "/v1/models"}, [b""]))
    assert sent[0]["status"] == 500 and b"internal error on /v1/models" in sent[1]["body"]


def test_a_client_that_leaves_cancels_its_handler_at_once() -> None:
    state = {"started": False, "cancelled": False}

    async def queued(request: Request) -> Response:
        state["started"] = True
        try:
            await asyncio.Event().wait()  # waits for a worker slot that never comes
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        return Response()

    async def scenario() -> list[dict[str, Any]]:
        left = asyncio.Event()
        sent: list[dict[str, Any]] = []
        requested = False

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"{}"}
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        task = asyncio.create_task(app((r"/v1/chat/completions", queued))(dict(SCOPE), receive, send))
        while not state["started"]:
            await asyncio.sleep(0)
        left.set()
        await asyncio.wait_for(task, 5)
        return sent

    assert asyncio.run(scenario()) == [] and state["cancelled"]


def test_a_client_that_leaves_while_sending_its_body_reaches_no_handler() -> None:
    async def handler(request: Request) -> Response:
        raise AssertionError("never called")

    async def scenario() -> None:
        messages = [{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        async def send(message: dict[str, Any]) -> None:
            raise AssertionError("nothing is sent")

        await app((r"/v1/chat/completions", handler))(dict(SCOPE), receive, send)

    asyncio.run(scenario())


@pytest.mark.parametrize("ending", ["client disconnects", "server stops"])
def test_a_stream_cut_off_mid_send_runs_its_clean_up_before_the_request_is_over(ending: str) -> None:
    body = Body()
    generator = body.chunks()  # held here, so garbage collection cannot be what closes it

    async def respond(request: Request) -> Response:
        return Response(stream=generator, content_type="text/event-stream")

    async def scenario() -> bool:
        sent: list[dict] = []
        reader_gone = asyncio.Event()
        requested = False

        async def receive() -> dict:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await reader_gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)
            if len(sent) >= 3:
                await asyncio.Event().wait()  # the client stops reading: this send never completes

        task = asyncio.create_task(app((r"/v1/chat/completions", respond))(dict(SCOPE), receive, send))
        while len(sent) < 3:
            await asyncio.sleep(0)
        if ending == "client disconnects":
            reader_gone.set()
            await task
        else:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert b"content-length" not in dict(sent[0]["headers"])  # a stream has no length
        assert sent[1]["more_body"] is True
        return body.finished

    assert asyncio.run(scenario()), "the stream's finally (slot release, request log row) did not run"
    assert generator.ag_frame is None  # closed, not merely suspended at a yield


def test_a_whole_stream_ends_with_an_empty_last_body_and_is_closed() -> None:
    closed = []

    async def chunks() -> AsyncIterator[bytes]:
        try:
            for part in (b"a", b"", b"b"):
                yield part
        finally:
            closed.append(True)

    async def respond(request: Request) -> Response:
        return Response(stream=chunks(), content_type="text/event-stream")

    sent = asyncio.run(call(app((r"/v1/chat/completions", respond)), dict(SCOPE), [b""]))
    assert [m.get("body") for m in sent[1:]] == [b"a", b"b", b""]  # empty chunks are not sent
    assert [m.get("more_body", False) for m in sent[1:]] == [True, True, False] and closed == [True]


def test_headers_are_case_insensitive_both_ways() -> None:
    headers = Headers([(b"X-Api-Key", b"k"), (b"accept", b"a"), (b"Accept", b"b")])
    assert headers["x-api-key"] == headers.get("X-API-KEY") == "k" and headers["ACCEPT"] == "a, b"
    assert "X-Api-Key" in headers and "authorization" not in headers and headers.get("authorization", "") == ""
    response = Response()
    response["Retry-After"] = "3"
    response.setdefault("retry-after", "9")
    assert response["RETRY-AFTER"] == "3" and ("Retry-After", "3") in list(response.items())
