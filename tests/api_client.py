"""A test client for the public API, in process: it drives the ASGI application the gateway
serves (ocsweb.asgi.application: the body cap, then the lean path) as an ASGI server would, so
a test exercises the same code a student's request does. Its calls read like Django's test
client's (`get(path, HTTP_AUTHORIZATION=…)`, `post(path, body, content_type=…)`), which the API
tests used while the API was a Django view."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from asgiref.sync import async_to_sync

from core.api_http import Headers


class ApiResponse:
    """What the client received: status, headers (case-insensitive), the whole body (a stream's
    chunks joined, `chunks` one by one)."""

    def __init__(self, status: int, headers: Headers, chunks: list[bytes]) -> None:
        self.status_code, self.headers, self.chunks = status, headers, chunks
        self.content = b"".join(chunks)

    def json(self) -> Any:  # noqa: ANN401 - whatever the API answered
        return json.loads(self.content)

    def __getitem__(self, name: str) -> str:
        return self.headers[name]

    def __contains__(self, name: str) -> bool:
        return name in self.headers

    def __repr__(self) -> str:
        return f"<ApiResponse {self.status_code} {self.content[:200]!r}>"


def _headers_of(extra: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    """Django test client keywords (HTTP_X_API_KEY="k") and a `headers` mapping, as ASGI headers."""
    pairs: list[tuple[str, str]] = []
    for name, value in extra.items():
        if name.startswith("HTTP_"):
            pairs.append((name[5:].replace("_", "-").lower(), str(value)))
    for name, value in (extra.get("headers") or {}).items():
        pairs.append((name.lower(), str(value)))
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in pairs]


class ApiClient:
    """`defaults`: keywords every request carries (REMOTE_ADDR, HTTP_X_FORWARDED_FOR, …)."""

    def __init__(self, app: Any = None, **defaults: Any) -> None:  # noqa: ANN401 - an ASGI application
        if app is None:
            from ocsweb.asgi import application as app
        self.app = app
        self.defaults = defaults

    async def arequest(self, method: str, path: str, body: bytes | str = b"", *,
                       content_type: str | None = None, **extra: Any) -> ApiResponse:  # noqa: ANN401
        options = {**self.defaults, **extra}
        payload = body.encode() if isinstance(body, str) else body
        headers = _headers_of(options)
        if content_type is not None:
            headers.append((b"content-type", content_type.encode("latin-1")))
        if payload or method not in ("GET", "HEAD"):
            headers.append((b"content-length", str(len(payload)).encode()))
        path, _, query = path.partition("?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
                 "query_string": query.encode(), "headers": headers,
                 "client": (options.get("REMOTE_ADDR", "127.0.0.1"), 50000), "server": ("testserver", 80)}
        sent = False
        status, response_headers, chunks = 0, Headers(), []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await asyncio.Event().wait()  # the client stays until the answer is whole
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, response_headers
            if message["type"] == "http.response.start":
                status, response_headers = message["status"], Headers(message.get("headers", ()))
            elif message["type"] == "http.response.body" and message.get("body"):
                chunks.append(message["body"])

        await self.app(scope, receive, send)
        return ApiResponse(status, response_headers, chunks)

    async def aget(self, path: str, **extra: Any) -> ApiResponse:  # noqa: ANN401
        return await self.arequest("GET", path, **extra)

    async def apost(self, path: str, data: bytes | str | Mapping[str, Any] = b"", content_type: str = "application/json",
                    **extra: Any) -> ApiResponse:  # noqa: ANN401
        body = json.dumps(data) if isinstance(data, Mapping) else data
        return await self.arequest("POST", path, body, content_type=content_type, **extra)

    def request(self, method: str, path: str, body: bytes | str = b"", **extra: Any) -> ApiResponse:  # noqa: ANN401
        return async_to_sync(self.arequest)(method, path, body, **extra)

    def get(self, path: str, **extra: Any) -> ApiResponse:  # noqa: ANN401
        return async_to_sync(self.aget)(path, **extra)

    def post(self, path: str, data: bytes | str | Mapping[str, Any] = b"", content_type: str = "application/json",
             **extra: Any) -> ApiResponse:  # noqa: ANN401
        return async_to_sync(self.apost)(path, data, content_type, **extra)
