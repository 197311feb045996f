"""The request body cap (OCS_MAX_BODY_BYTES), enforced by the ASGI entry point before a body
is read in full: a declared Content-Length over the cap is refused before one byte is read, a
chunked body once the bytes received pass it. The 413 comes in the envelope the client's
protocol expects. Pure: no Django."""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]


class BodyTooLarge(Exception):
    """Raised by CappedReceive when the body passes the cap; the entry point answers 413."""


def declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """Content-Length as the client declared it; None when absent or not a number (a body
    without a usable length is counted as it arrives)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


class CappedReceive:
    """Wraps an ASGI `receive`, counting body bytes; raises BodyTooLarge once past `limit`."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self._receive = receive
        self.limit = limit
        self.received = 0

    async def __call__(self) -> Message:
        message = await self._receive()
        if message.get("type") == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                raise BodyTooLarge()
        return message


def too_large(path: str, limit: int) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, body) of the 413 for `path`: Anthropic's envelope on /v1/messages,
    OpenAI's on the rest of the API and Copilot's Ollama routes, a plain JSON detail elsewhere."""
    message = f"The request body is too large: at most {limit} bytes are accepted."
    if path.startswith("/v1/messages"):
        body: dict[str, object] = {"type": "error", "error": {"type": "request_too_large", "message": message}}
    elif path.startswith(("/v1/", "/ollama/")):
        body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                          "code": "request_too_large"}}
    else:
        body = {"detail": message}
    encoded = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(encoded)).encode()),
               (b"connection", b"close"), (b"x-content-type-options", b"nosniff")]
    return 413, headers, encoded
