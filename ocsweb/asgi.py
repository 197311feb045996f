"""ASGI entry point, served by uvicorn or daphne: `python -m ocsweb.gateway … ocsweb.asgi:application`.

Two Django handlers share one URLconf. The hot paths (the public API, Copilot's Ollama routes,
the probes) go to BareASGIHandler; the admin and the pages keep Django's full handler.

Why (measured with `manage.py bench_gateway`; p50 time to first token added by the gateway):
under ASGI every classic middleware runs its hooks through sync_to_async on one shared thread
(two thread hops per middleware), and the request_started / request_finished signals cost two
more hops for receivers that act on that shared thread's database connection — which the API
never uses: its few database reads (cache misses) run in pool threads and look after their own
connections (core.db). Full handler: +10 ms; no middleware: +8 ms; no middleware and no
request signals: +3.3 ms. The API views need neither: they authenticate by key, are
CSRF-exempt and use no session.

In front of both, the body cap (OCS_MAX_BODY_BYTES, core/body_limit.py): a declared
Content-Length over it is answered 413 unread, a chunked body as soon as it passes it, in the
client's envelope. Django alone would spool a body of any size to disk before anyone looked.
"""
import asyncio
import logging
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.exceptions import RequestAborted  # noqa: E402
from django.core.handlers.asgi import ASGIHandler, get_script_prefix  # noqa: E402
from django.http import StreamingHttpResponse  # noqa: E402
from django.urls import set_script_prefix  # noqa: E402

from core.body_limit import BodyTooLarge, CappedReceive, declared_length, too_large  # noqa: E402

django_asgi_app = get_asgi_application()

log = logging.getLogger(__name__)

HOT_PATH_PREFIXES = ("/v1/", "/ollama/", "/healthz", "/readyz")


class BareASGIHandler(ASGIHandler):
    """Django's ASGI handler with no middleware and no request signals. handle() follows
    Django 5.2's ASGIHandler.handle (pinned in requirements.txt) without the two signals."""

    def load_middleware(self, is_async: bool = False) -> None:
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = []  # read once, here, while the chain is built
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = full

    async def handle(self, scope, receive, send):  # noqa: ANN001, ANN201
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            assert error_response is not None  # Django returns one or the other
            body_file.close()
            await self.send_response(error_response, send)
            _close_without_signal(error_response)
            return

        async def process_request(request, send):  # noqa: ANN001, ANN202
            response = await self.run_get_response(request)
            try:
                if isinstance(response, StreamingHttpResponse) and response.is_async and not response.cookies:
                    await _send_stream(response, send)
                else:
                    await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client disconnected, or the server is stopping, while the response was sent
            finally:
                await _close_stream_body(response)
            return response

        # The disconnect listener goes first: it cancels the view when the client leaves, which
        # is how an abandoned stream releases its worker slot at once.
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request(request, send)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The server is stopping (daphne cancels every request on SIGTERM, uvicorn those still running after its grace). Let the view
            # unwind before the loop ends: it frees its slot and writes its request log row.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            body_file.close()
            raise
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            pass
        else:
            _close_without_signal(response)
        body_file.close()


async def _send_stream(response, send) -> None:  # noqa: ANN001
    """Django's send_response for the hot path's streams, minus three wrapping generators and
    the re-chunking Django applies to every part: the pipeline's chunks are bytes already, and
    each goes to the server as it comes (measured with `manage.py bench_gateway`). Closing the
    body stays with _close_stream_body."""
    headers = [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    async for chunk in response._iterator:  # the body as given (Django 5.2 pinned)
        if chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body"})


async def _close_stream_body(response) -> None:  # noqa: ANN001
    """Close a streaming response's body generator now. Django's send_response closes only its
    own wrapper around the body, so a stream cut off while its handler waits in `send` would
    leave the body suspended at a yield until garbage collection runs its `finally` (free the
    worker slot, write the request log row) — and a server that is stopping ends its loop first.
    Daphne's `send` never waits; an ASGI server with flow control (uvicorn) waits there when the
    client stops reading (tests/ocsweb/test_asgi.py)."""
    if response.streaming and response.is_async:
        aclose = getattr(response._iterator, "aclose", None)  # the body as given (Django 5.2 pinned)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                log.exception("closing a stream's body failed")


def _close_without_signal(response) -> None:  # noqa: ANN001
    """HttpResponse.close() minus request_finished: run the response's resource closers."""
    for closer in response._resource_closers:
        try:
            closer()
        except Exception:
            pass
    response._resource_closers.clear()
    response.closed = True


api_asgi_app = BareASGIHandler()


async def http_application(scope, receive, send):  # noqa: ANN001, ANN201
    """Routes to the bare or the full handler, with the body cap (OCS_MAX_BODY_BYTES) applied
    before either reads the body: Django would otherwise spool any size to disk first."""
    app = api_asgi_app if scope["path"].startswith(HOT_PATH_PREFIXES) else django_asgi_app
    limit = settings.OCS["MAX_BODY_BYTES"]
    declared = declared_length(scope.get("headers", []))
    if declared is not None and declared > limit:
        await _send_too_large(scope, send, limit)
        return
    try:
        await app(scope, CappedReceive(receive, limit), send)
    except BodyTooLarge:
        # Raised while the handler was still reading the body: nothing has been sent yet.
        await _send_too_large(scope, send, limit)


async def _send_too_large(scope, send, limit: int) -> None:  # noqa: ANN001
    status, headers, body = too_large(scope["path"], limit)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# WebSockets: the teacher's live fleet view (/ws/fleet/, portal/consumers.py), with the session's
# user and the same allowed hosts as the pages (a socket from another site's page is refused).
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from portal.consumers import FleetConsumer  # noqa: E402

websocket_application = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter([
    path("ws/fleet/", FleetConsumer.as_asgi()),
])))

application = ProtocolTypeRouter({"http": http_application, "websocket": websocket_application})
