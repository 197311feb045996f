"""HTTP client towards the workers (llama-server). One pooled client per event loop."""
from __future__ import annotations

import asyncio

import httpx
from django.conf import settings

_clients: dict[int, httpx.AsyncClient] = {}

# Failures that happened before the worker sent anything: safe to retry on another worker.
RETRYABLE_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout, httpx.RemoteProtocolError,
                    httpx.ReadError, httpx.WriteError, httpx.PoolTimeout)


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
            limits=httpx.Limits(max_connections=2000, max_keepalive_connections=200),
            trust_env=False,  # workers are on the private network: never through a proxy
        )
        _clients[loop_id] = client
    return client
