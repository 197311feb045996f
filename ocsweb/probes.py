"""Liveness and readiness probes for load balancers, served by the lean path (ocsweb/asgi.py):
a probe every few seconds from every balancer costs no Django request handling."""
from __future__ import annotations

from core.api_http import Request, Response, json_response
from core.lean_asgi import Routes
from core.live import LiveStateUnavailable, live_state
from fleet.scheduler import ROUTABLE_STATES
from fleet.selectors import fleet_snapshot


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    """200 when this gateway can serve: its live state answers and some worker is routable;
    503 with the reason otherwise."""
    try:
        await live_state().check()
    except LiveStateUnavailable as exc:
        return json_response({"status": "live state unavailable", "reason": str(exc)}, status=503)
    snapshot = await fleet_snapshot()
    healthy = [w.name for w in snapshot.workers if w.state in ROUTABLE_STATES]
    status = 200 if healthy else 503
    return json_response({"status": "ready" if healthy else "no healthy worker", "healthy_workers": len(healthy)},
                         status=status)


ROUTES = Routes({"/healthz": healthz, "/readyz": readyz})
