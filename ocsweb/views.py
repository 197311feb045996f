"""Liveness and readiness probes for load balancers and the operator."""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from fleet.scheduler import ROUTABLE_STATES
from fleet.selectors import fleet_snapshot


async def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


async def readyz(request: HttpRequest) -> JsonResponse:
    snapshot = await fleet_snapshot()
    healthy = [w.name for w in snapshot.workers if w.state in ROUTABLE_STATES]
    status = 200 if healthy else 503
    return JsonResponse({"status": "ready" if healthy else "no healthy worker", "healthy_workers": len(healthy)},
                        status=status)
