"""HTTP client towards the workers (llama-server). One pooled client per event loop."""
from __future__ import annotations

import asyncio

import httpx
from django.conf import settings

_clients: dict[int, httpx.AsyncClient] = {}

# Failures that happened before the worker sent anything: safe to retry on another worker.
RETRYABLE_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout, httpx.RemoteProtocolError,
                    httpx.ReadError, httpx.WriteError, httpx.PoolTimeout)
# What a pooled keep-alive connection that the worker closed meanwhile looks like on reuse.
STALE_CONNECTION_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
# llama-server (cpp-httplib) closes idle keep-alive connections after 5 s, httpx's default
# expiry is also 5 s: with equal timers httpx sometimes reuses a connection the worker has just
# closed. Expire ours well before theirs.
KEEPALIVE_EXPIRY_S = 2.0


def upstream_client() -> httpx.AsyncClient:
    loop_id = id(asyncio.get_running_loop())
    client = _clients.get(loop_id)
    if client is None:
        timeout = httpx.Timeout(
            connect=settings.OCS["UPSTREAM_CONNECT_TIMEOUT_S"],
            read=settings.OCS["UPSTREAM_READ_TIMEOUT_S"],
            write=30.0,
            pool=settings.OCS["UPSTREAM_CONNECT_TIMEOUT_S"],
        )
        client = httpx.AsyncClient(
            timeout=timeout,
            limits=httpx.Limits(max_connections=2000, max_keepalive_connections=200,
                                keepalive_expiry=KEEPALIVE_EXPIRY_S),
            trust_env=False,  # workers are on the private network: never through a proxy
        )
        _clients[loop_id] = client
    return client


async def send(request: httpx.Request, *, stream: bool) -> httpx.Response:
    """Send, retrying once on a fresh connection when a pooled one turns out to be closed: that
    is the connection's fault, not the worker's, and nothing has reached the worker yet."""
    client = upstream_client()
    try:
        return await client.send(request, stream=stream)
    except STALE_CONNECTION_ERRORS:
        return await client.send(request, stream=stream)
