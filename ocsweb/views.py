"""Prometheus metrics, for the operator (the probes are on the lean path: ocsweb/probes.py)."""
from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.private_access import private_access_allowed
from fleet.selectors import fleet_snapshot
from inference.admission.live import admission_live
from inference.prometheus import QUEUE_DEPTH, WORKER_BUSY, WORKER_LANE, WORKER_SLOTS, WORKER_STATE


async def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics of this gateway process; fleet gauges are filled in at each scrape."""
    allowed = private_access_allowed(
        remote_addr=request.META.get("REMOTE_ADDR", ""),
        forwarded_for=request.headers.get("X-Forwarded-For"),
        authorization=request.headers.get("Authorization", ""),
        token=settings.OCS["METRICS_TOKEN"],
        networks=settings.OCS["METRICS_NETWORKS"],
        trusted_proxies=settings.OCS["TRUSTED_PROXIES"],
        client_header=(request.headers.get(settings.OCS["CLIENT_ADDRESS_HEADER"])
                       if settings.OCS["CLIENT_ADDRESS_HEADER"] else None),
    )
    if not allowed:
        return HttpResponse("metrics are readable from the private network or with the staff token\n",
                            status=403, content_type="text/plain")
    snapshot = await fleet_snapshot()
    live = admission_live()
    view = await live.view([w.id for w in snapshot.workers], None)
    WORKER_STATE.clear()
    WORKER_SLOTS.clear()
    WORKER_BUSY.clear()
    WORKER_LANE.clear()
    for worker in snapshot.workers:
        WORKER_STATE.labels(worker.name, worker.pool_name, worker.state).set(1)
        WORKER_SLOTS.labels(worker.name, worker.pool_name).set(worker.slots)
        WORKER_BUSY.labels(worker.name, worker.pool_name).set(view.busy.get(worker.id, 0))
        WORKER_LANE.labels(worker.name, worker.pool_name).set(worker.lane_tokens)
    QUEUE_DEPTH.clear()
    for line, depth in (await sync_to_async(live.queue_depths_sync, thread_sensitive=False)()).items():
        QUEUE_DEPTH.labels(line).set(depth)
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)
