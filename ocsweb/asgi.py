"""ASGI entry point, served by uvicorn or daphne: `python -m ocsweb.gateway … ocsweb.asgi:application`.

Two applications behind one body cap. The public API (/v1/*, Copilot's /ollama/<key>/*) and the
probes go to the lean path (core/lean_asgi.py: routes in inference/routes.py and
ocsweb/probes.py); the pages, the portal's JSON, the agents' API and the admin keep Django's full
handler, with its middleware, sessions and CSRF.

Why the API has a path of its own (measured with `manage.py bench_gateway`; docs/performance.md):
under ASGI every classic middleware runs its hooks through sync_to_async on one shared thread
(two thread hops each), the request_started / request_finished signals cost two more, and
Django's request and response objects, URL resolver and response iterator wrapping cost the rest:
full handler +10 ms to the first token; no middleware +8 ms; no middleware and no signals (the
previous "bare" handler) +2.9 ms at p50. The API needs none of it: it authenticates by key, uses
no session or cookie, and reads the database only off the request path (key cache misses in pool
threads, the request log writer). Channels' AsyncHttpConsumer was measured beside it and not
taken (docs/performance.md says why).

In front of both, the body cap (OCS_MAX_BODY_BYTES, core/body_limit.py): a declared
Content-Length over it is answered 413 unread, a chunked body as soon as it passes it, in the
client's envelope. Django alone would spool a body of any size to disk before anyone looked.
"""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

from core.body_limit import BodyTooLarge, CappedReceive, declared_length, too_large  # noqa: E402
from core.lean_asgi import LeanApp  # noqa: E402

django_asgi_app = get_asgi_application()

from inference import routes as api_routes  # noqa: E402 - after Django's setup: it imports models
from ocsweb import probes  # noqa: E402

api_asgi_app = LeanApp(api_routes.ROUTES + probes.ROUTES, on_error=api_routes.unhandled, fallback=django_asgi_app)


async def http_application(scope, receive, send):  # noqa: ANN001, ANN201
    """The lean path, or Django for the paths it does not serve, with the body cap
    (OCS_MAX_BODY_BYTES) applied before either reads the body: Django would otherwise spool any
    size to disk first."""
    limit = settings.OCS["MAX_BODY_BYTES"]
    declared = declared_length(scope.get("headers", []))
    if declared is not None and declared > limit:
        await _send_too_large(scope, send, limit)
        return
    try:
        await api_asgi_app(scope, CappedReceive(receive, limit), send)
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
