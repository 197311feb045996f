"""The body cap holds before a body is read in full, with a 413 in the client's own envelope
(issue 9, item 8). Driven through the real ASGI application."""
from __future__ import annotations

import asyncio
import json

import pytest

from ocsweb.asgi import application

LIMIT = 4096


@pytest.fixture(autouse=True)
def small_cap(settings) -> None:  # noqa: ANN001
    settings.OCS = {**settings.OCS, "MAX_BODY_BYTES": LIMIT}


def call(path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]]) -> tuple[int, dict, int]:
    """POST `chunks` to `path`; returns (status, JSON body, how many chunks the server read)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), *headers],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    read = 0
    sent: list[dict] = []

    async def receive() -> dict:
        nonlocal read
        if read < len(chunks):
            read += 1
            return {"type": "http.request", "body": chunks[read - 1], "more_body": read < len(chunks)}
        await asyncio.sleep(3600)  # the client would wait for an answer here
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(asyncio.wait_for(application(scope, receive, send), timeout=30))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), read


ENVELOPES = {
    "/v1/messages": lambda body: body["type"] == "error" and body["error"]["type"] == "request_too_large",
    "/v1/chat/completions": lambda body: body["error"]["code"] == "request_too_large",
    "/ollama/ocs-aaaaaaaaaa-x/v1/chat/completions": lambda body: body["error"]["code"] == "request_too_large",
    "/agent/v1/register": lambda body: "too large" in body["detail"],
}


@pytest.mark.parametrize("path", list(ENVELOPES))
def test_a_declared_length_over_the_cap_is_refused_before_any_byte_is_read(path: str) -> None:
    status, body, read = call(path, [b"x" * 100], [(b"content-length", str(LIMIT * 1000).encode())])
    assert status == 413 and ENVELOPES[path](body), body
    assert read == 0


@pytest.mark.parametrize("path", list(ENVELOPES))
def test_a_chunked_body_stops_being_read_once_past_the_cap(path: str) -> None:
    chunks = [b"x" * 1000] * 100  # 100 kB, no Content-Length
    status, body, read = call(path, chunks, [(b"transfer-encoding", b"chunked")])
    assert status == 413 and ENVELOPES[path](body), body
    assert read == LIMIT // 1000 + 1  # the first chunk past the cap, and not one more


@pytest.mark.django_db(transaction=True)
def test_a_body_under_the_cap_reaches_the_view() -> None:
    status, body, read = call("/v1/chat/completions", [b"{}"], [(b"content-length", b"2")])
    assert status == 401 and body["error"]["code"] == "invalid_api_key"  # the view ran: no key sent
