"""The reference hop: the cheapest Python pass-through this machine can run, measured beside the
gateway in the same bench run.

A bare ASGI callable on the gateway's own server stack (uvicorn with uvloop and httptools) and
its own upstream client (aiohttp, one pooled session, the same options as inference/upstream.py).
It forwards a request's body to the upstream and streams the answer back, and does nothing else:
no auth, limits, logging, metrics or database. What the gateway costs above this hop is what its
own work costs; the hop's cost over direct is what any Python hop costs here.

    python -m research.gateway_bench.reference_hop --port 9100 --upstream http://127.0.0.1:9000

No Django imported.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import aiohttp

KEEPALIVE_EXPIRY_S = 2.0  # as inference/upstream.py
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0

Scope = dict[str, Any]


class ReferenceHop:
    """The ASGI application: GET /health(z) answers "ok"; every other request is forwarded."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2000, keepalive_timeout=KEEPALIVE_EXPIRY_S),
                timeout=aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S,
                                              sock_read=READ_TIMEOUT_S),
                auto_decompress=False, trust_env=False, skip_auto_headers=("Accept-Encoding", "User-Agent"))
        return self._session

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET" and scope["path"] in ("/health", "/healthz"):
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain"), (b"server", b"reference-hop")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        try:
            response = await self.session().post(self.upstream + scope["path"], data=body,
                                                 headers={"Content-Type": "application/json"})
        except (aiohttp.ClientError, TimeoutError) as exc:
            await send({"type": "http.response.start", "status": 502,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": f"upstream: {type(exc).__name__}".encode()})
            return
        try:
            await send({"type": "http.response.start", "status": response.status,
                        "headers": [(b"content-type", response.headers.get("Content-Type", "").encode())]})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            if response.content.at_eof():
                response.release()  # read to the end: the connection goes back to the pool
            else:
                response.close()


def main(argv: list[str] | None = None, app_for: Callable[[str], Any] = ReferenceHop,
         description: str = __doc__.split("\n\n")[0]) -> None:
    """Serve `app_for(upstream)` (an ASGI application) as the hop: consumer_hop.py serves its own."""
    import uvicorn

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="The upstream's root URL.")
    args = parser.parse_args(argv)
    uvicorn.run(app_for(args.upstream), host=args.host, port=args.port, loop="uvloop", http="httptools",
                lifespan="off", access_log=False, log_level="warning", proxy_headers=False, server_header=False)


if __name__ == "__main__":
    main()
