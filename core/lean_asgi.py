"""The API's lean path: an ASGI application that routes a request to its handler and sends the
handler's answer, and nothing else — no middleware, no request signals, no URL resolver, no
Django request or response objects (ocsweb/asgi.py says why, with the measurements). Pure: no
Django.

A request's life here:
- its body is read in full (the entry point has capped its size; a client that leaves while
  sending it gets nothing);
- its handler runs beside a listener for the client's disconnect: a client that leaves cancels
  the handler, which is how an abandoned request gives up its queue place or worker slot at
  once;
- a plain answer goes out in one piece with its Content-Length; a stream goes out chunk by
  chunk as the handler's iterator yields them, and that iterator is always closed before the
  request is over (see _send);
- the server stopping (its task cancelled) cancels the handler and waits for it to unwind, so
  that its clean-up (the slot freed, the request log row written) runs before the loop ends;
- an exception that escapes a handler is turned into an answer by `on_error` (in the client's
  envelope); none reaches the server.
"""
from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from core.api_http import Request, Response

log = logging.getLogger(__name__)

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Handler = Callable[..., Awaitable[Response]]
OnError = Callable[[Request, Exception], Response]


class Routes:
    """Exact paths first, then patterns in order (their named groups become the handler's
    keyword arguments)."""

    def __init__(self, exact: Mapping[str, Handler], patterns: Iterable[tuple[str, Handler]] = ()) -> None:
        self.exact = dict(exact)
        self.patterns = [(re.compile(pattern), handler) for pattern, handler in patterns]

    def match(self, path: str) -> tuple[Handler, dict[str, str]] | None:
        handler = self.exact.get(path)
        if handler is not None:
            return handler, {}
        for pattern, handler in self.patterns:
            found = pattern.fullmatch(path)
            if found is not None:
                return handler, found.groupdict()
        return None

    def __add__(self, other: Routes) -> Routes:
        combined = Routes({**self.exact, **other.exact})
        combined.patterns = [*self.patterns, *other.patterns]
        return combined


class LeanApp:
    """An ASGI application over `routes`; a path that matches none goes to `fallback` (another
    ASGI application), untouched."""

    def __init__(self, routes: Routes, *, on_error: OnError, fallback: Callable[..., Awaitable[None]]) -> None:
        self.routes, self.on_error, self.fallback = routes, on_error, fallback

    async def __call__(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        found = self.routes.match(scope["path"])
        if found is None:
            await self.fallback(scope, receive, send)
            return
        handler, params = found
        body = await _read_body(receive)
        if body is None:
            return  # the client left before its request was whole
        request = Request.from_scope(scope, body)
        work = asyncio.ensure_future(self._answer(handler, request, params, send))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the server is stopping: let the handler unwind first
            work.cancel()
            gone.cancel()
            await asyncio.gather(work, gone, return_exceptions=True)
            raise
        if not work.done():  # the client left
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
        else:
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)
            work.result()

    async def _answer(self, handler: Handler, request: Request, params: dict[str, str], send: Send) -> None:
        try:
            response = await handler(request, **params)
        except Exception as exc:  # a bug in a handler: answered, logged by on_error
            response = self.on_error(request, exc)
        await _send(response, send)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole body, or None when the client disconnected first."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    body = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    while message.get("more_body", False):
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
    return b"".join(parts)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send(response: Response, send: Send) -> None:
    """Send `response`. A stream's iterator is closed here, however the sending ends: cut off
    while `send` waits (an ASGI server with flow control, such as uvicorn, waits there when the
    client stops reading), its `finally` would otherwise wait for garbage collection — which a
    stopping server never runs (tests/core/test_lean_asgi.py)."""
    start = {"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers()}
    stream = response.stream
    if stream is None:
        await send(start)
        await send({"type": "http.response.body", "body": response.body})
        return
    try:
        await send(start)
        async for chunk in stream:
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                log.exception("closing a stream's body failed")
