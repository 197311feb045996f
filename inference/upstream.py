"""HTTP client towards the workers (llama-server): one pooled aiohttp session per event loop.

aiohttp, not httpx, on this path because it measured cheaper per request and per chunk
(C-accelerated HTTP parser; docs/performance.md). The rest of the code sees only `post()` and
`UpstreamResponse`, so the client can be swapped again in this one module.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from django.conf import settings

from fleet.scheduler import JSON_HEADERS

# Failures of the connection to a worker (refused, reset, closed mid-answer, silent past the
# read timeout). Before the worker sent anything they are safe to retry on another worker.
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)
# llama-server (cpp-httplib) closes idle keep-alive connections after 5 s. Expire ours well
# before that, so a request rarely meets a connection the worker has just closed.
KEEPALIVE_EXPIRY_S = 2.0

_sessions: dict[int, aiohttp.ClientSession] = {}
_fresh_sessions: dict[int, aiohttp.ClientSession] = {}  # the retry's: one new connection per request


def _session(*, fresh: bool = False) -> aiohttp.ClientSession:
    """This loop's pooled session; with fresh=True, its twin whose every request opens (and then
    closes) a connection of its own, so a retry can never meet another stale pooled one."""
    loop = asyncio.get_running_loop()
    sessions = _fresh_sessions if fresh else _sessions
    session = sessions.get(id(loop))
    if session is None or session.closed:
        connect_s = settings.OCS["UPSTREAM_CONNECT_TIMEOUT_S"]
        connector = (aiohttp.TCPConnector(limit=0, force_close=True) if fresh
                     else aiohttp.TCPConnector(limit=2000, keepalive_timeout=KEEPALIVE_EXPIRY_S))
        session = aiohttp.ClientSession(
            connector=connector,
            # connect: waiting for a pooled connection plus opening one; sock_read: silence between reads
            timeout=aiohttp.ClientTimeout(total=None, connect=connect_s, sock_connect=connect_s,
                                          sock_read=settings.OCS["UPSTREAM_READ_TIMEOUT_S"]),
            auto_decompress=False,  # bytes pass through as the worker sent them
            trust_env=False,  # workers are on the private network: never through a proxy
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
        )
        sessions[id(loop)] = session
    return session


class UpstreamResponse:
    """A worker's answer whose status line and headers have arrived; read its body with
    aiter_raw() and always aclose() it. Closing before the end closes the connection, which is
    how llama-server learns to stop decoding."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.content.iter_any():
            yield chunk

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # read to the end: the connection goes back to the pool
        else:
            self._response.close()


def _stale(exc: BaseException) -> bool:
    """A pooled keep-alive connection the worker closed meanwhile (not a refused connect)."""
    return (isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))
            and not isinstance(exc, aiohttp.ClientConnectorError))


async def post(url: str, body: dict[str, Any], headers: Mapping[str, str] = JSON_HEADERS) -> UpstreamResponse:
    """POST `body` as JSON with `headers` (the worker's, from the fleet snapshot: its key as
    `Authorization: Bearer`, built once per snapshot); returns once the status line and headers
    are in. Retries once, on a
    connection opened for the retry (never another pooled one, which may be just as stale), when
    a pooled one turns out to be closed: that is the connection's fault, not the worker's, and
    nothing has reached the worker yet. A worker that fails the fresh connection too has failed."""
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    session = _session()
    try:
        response = await session.post(url, data=data, headers=headers)
    except TRANSPORT_ERRORS as exc:
        if not _stale(exc):
            raise
        response = await _session(fresh=True).post(url, data=data, headers=headers)
    return UpstreamResponse(response)


async def close_sessions() -> None:
    """Close this loop's sessions (a stopping gateway, once its requests have unwound)."""
    for sessions in (_sessions, _fresh_sessions):
        session = sessions.pop(id(asyncio.get_running_loop()), None)
        if session is not None:
            await session.close()
