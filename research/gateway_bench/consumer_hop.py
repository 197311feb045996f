"""The reference hop's work done the way the design card first placed the streaming endpoint: a
Channels AsyncHttpConsumer under a URLRouter in a ProtocolTypeRouter, on the same server stack
(uvicorn, uvloop, httptools) and the same upstream client (research/gateway_bench/reference_hop.py's
session). `bench_gateway --consumer-hop` measures it beside the bare hop, so the cost of Channels'
HTTP consumer over a bare ASGI callable is a number, not a guess (docs/performance.md).

No channel layer (CHANNEL_LAYERS is empty here): the cheapest a consumer can be. With one (the
gateway's settings always name one, Redis in production), every HTTP consumer also opens a channel
of its own and listens on it for the request's whole life.

    python -m research.gateway_bench.consumer_hop --port 9101 --upstream http://127.0.0.1:9000
"""
from __future__ import annotations

import aiohttp
import django
from django.conf import settings

from research.gateway_bench import reference_hop
from research.gateway_bench.reference_hop import ReferenceHop


def application(upstream: str):  # noqa: ANN201 - an ASGI application
    if not settings.configured:
        settings.configure(INSTALLED_APPS=[], ROOT_URLCONF=__name__, CHANNEL_LAYERS={}, USE_TZ=True)
        django.setup()
    from channels.generic.http import AsyncHttpConsumer
    from channels.routing import ProtocolTypeRouter, URLRouter
    from django.urls import path, re_path

    hop = ReferenceHop(upstream)

    class Health(AsyncHttpConsumer):
        async def handle(self, body: bytes) -> None:
            await self.send_response(200, b"ok", headers=[(b"content-type", b"text/plain"),
                                                          (b"server", b"consumer-hop")])

    class Forward(AsyncHttpConsumer):
        async def handle(self, body: bytes) -> None:
            try:
                response = await hop.session().post(hop.upstream + self.scope["path"], data=body,
                                                    headers={"Content-Type": "application/json"})
            except (aiohttp.ClientError, TimeoutError) as exc:
                await self.send_response(502, f"upstream: {type(exc).__name__}".encode())
                return
            try:
                await self.send_headers(status=response.status, headers=[
                    (b"content-type", response.headers.get("Content-Type", "").encode())])
                async for chunk in response.content.iter_any():
                    await self.send_body(chunk, more_body=True)
                await self.send_body(b"")
            finally:
                if response.content.at_eof():
                    response.release()
                else:
                    response.close()

    return ProtocolTypeRouter({"http": URLRouter([
        path("healthz", Health.as_asgi()),
        re_path(r"^v1/", Forward.as_asgi()),
    ])})


urlpatterns: list[object] = []  # ROOT_URLCONF: the URLRouter above does the routing


def main(argv: list[str] | None = None) -> None:
    reference_hop.main(argv, app_for=application, description=__doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
