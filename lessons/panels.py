"""The live data each lesson shows, read from this installation. Reads only.

Students see worker names, states and slots, never a worker's address (base_url): workers are
not exposed to students.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.utils import timezone

from accounts.models import User
from core.dates import moment_text
from core.live import live_state, worker_resource
from core.private_access import DEFAULT_PRIVATE_NETWORKS
from accounts.limits.quota import concurrency_resource
from fleet.models import Pool, PoolEvent, Rig, Worker, WorkerEvent
from inference import routes as api_routes
from inference import views as api_views
from inference.models import RequestLog
from lessons import evidence, research_bridge
from lessons.syllabus import load_catalogue
from lessons.editor_clients import EDITOR_LABELS
from lessons.models import StepDone
from lessons.why_chosen import why_chosen

TTFT_STEPS = frozenset(step.slug for step in load_catalogue().steps if step.kind == "ttft-measure")

# The API surfaces a lesson talks about, and the route that shows whether this installation serves it.
API_ROUTES = (
    ("OpenAI chat completions", "/v1/chat/completions"),
    ("OpenAI completions", "/v1/completions"),
    ("OpenAI model list", "/v1/models"),
    ("Anthropic Messages (Claude Code)", "/v1/messages"),
    ("Anthropic token counting", "/v1/messages/count_tokens"),
    ("OpenAI Responses", "/v1/responses"),
    ("Ollama discovery for Copilot", "/ollama/KEY/api/tags"),
)


def route_served(path: str) -> bool:
    """True when the API's lean path (inference/routes.py, served in front of Django by
    ocsweb/asgi.py) has a handler for `path` other than its catch-all 404. Django's URL resolver
    knows nothing of these paths: the API is not routed through it."""
    found = api_routes.ROUTES.match(path)
    return found is not None and found[0] is not api_views.not_found


def _on_netbird(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address in ipaddress.ip_network("100.64.0.0/10")


def _loopback(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def installation() -> dict[str, Any]:
    return {
        "database": connection.vendor,
        "live_state": "Redis (shared by every gateway process)" if settings.REDIS_URL
        else "in this process (the embedded default: one gateway process)",
        "environment": settings.OCS_ENV,
        "routes": [(label, path, route_served(path)) for label, path in API_ROUTES],
        "private_networks": ", ".join(DEFAULT_PRIVATE_NETWORKS),
        "workers": Worker.objects.count(),
        "rigs": Rig.objects.count(),
    }


def network() -> dict[str, Any]:
    now = timezone.now()
    silent_s = settings.OCS["RIG_SILENT_S"]
    rigs = []
    for rig in Rig.objects.prefetch_related("workers"):
        age_s = None if rig.last_heartbeat_at is None else (now - rig.last_heartbeat_at).total_seconds()
        rigs.append({"name": rig.name, "heartbeat_age_s": age_s, "agent_version": rig.agent_version,
                     "rehearsal": rig.rehearsal,
                     "silent": age_s is None or age_s > silent_s, "workers": len(rig.workers.all())})
    urls = list(Worker.objects.values_list("base_url", flat=True))
    return {
        "rigs": rigs, "silent_after_s": silent_s,
        "workers_total": len(urls),
        "workers_netbird": sum(1 for url in urls if _on_netbird(url)),
        "workers_loopback": sum(1 for url in urls if _loopback(url)),
    }


def rigs() -> list[dict[str, Any]]:
    rows = []
    for rig in Rig.objects.prefetch_related("gpus", "workers__model"):
        rows.append({
            "name": rig.name, "gpu_status": rig.gpu_status, "rehearsal": rig.rehearsal,
            "gpus": [{"index": g.index, "name": g.name, "utilization_pct": g.utilization_pct,
                      "memory_used_mib": g.memory_used_mib, "memory_total_mib": g.memory_total_mib,
                      "pcie": f"Gen{g.pcie_gen} x{g.pcie_width}" if g.pcie_gen and g.pcie_width else ""}
                     for g in rig.gpus.all()],
            "workers": [{"name": w.name, "state": w.state, "gpus": w.gpu_indices, "slots": w.slots,
                         "model": w.model.public_id, "split_mode": (w.launch or {}).get("split_mode", "")}
                        for w in rig.workers.all()],
        })
    return rows


def in_flight(user_id: int) -> int:
    """The person's requests running or waiting right now (their concurrency leases)."""
    resource = concurrency_resource(f"user:{user_id}")
    return async_to_sync(live_state().busy)([resource]).get(resource, 0)


@dataclass
class FleetView:
    pools: list[dict[str, Any]] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)
    queue: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    mine_in_flight: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"pools": self.pools, "workers": self.workers, "queue": self.queue, "events": self.events,
                "mine_in_flight": self.mine_in_flight}


def fleet(user: User | None = None) -> FleetView:
    """Pools, workers with their busy slots, the queue by pool and model, recent events."""
    workers = list(Worker.objects.select_related("pool", "model", "rig"))
    busy = async_to_sync(live_state().busy)([worker_resource(w.id) for w in workers]) if workers else {}
    pools = {p.id: p for p in Pool.objects.all()}
    view = FleetView()
    for pool in pools.values():
        members = [w for w in workers if w.pool_id == pool.id]
        view.pools.append({"name": pool.name, "may_lend": pool.may_lend, "workers": len(members),
                           "routable": sum(1 for w in members if w.state in ("healthy", "degraded")),
                           "slots": sum(w.slots for w in members),
                           "busy": sum(busy.get(worker_resource(w.id), 0) for w in members)})
    for w in workers:
        view.workers.append({"name": w.name, "pool": w.pool.name, "model": w.model.public_id, "state": w.state,
                             "slots": w.slots, "busy": busy.get(worker_resource(w.id), 0),
                             "rig": w.rig.name if w.rig else "", "gpus": w.gpu_indices})
    for line, depth in sorted(live_state().queue_depths_sync().items()):
        pool_id, _, model = line.partition(":")
        queued_pool = pools.get(int(pool_id)) if pool_id.isdigit() else None
        view.queue.append({"pool": queued_pool.name if queued_pool else pool_id, "model": model, "waiting": depth})
    for event in WorkerEvent.objects.select_related("worker").order_by("-at")[:5]:
        view.events.append({"at": event.at.isoformat(timespec="seconds"),
                            "at_text": moment_text(event.at, seconds=True),
                            "what": f"{event.worker.name}: {event.from_state} → {event.to_state}", "why": event.reason})
    for pool_event in PoolEvent.objects.select_related("pool").order_by("-at")[:3]:
        view.events.append({"at": pool_event.at.isoformat(timespec="seconds"),
                            "at_text": moment_text(pool_event.at, seconds=True),
                            "what": f"pool {pool_event.pool.name}: {pool_event.kind}", "why": pool_event.detail})
    view.events.sort(key=lambda e: e["at"], reverse=True)
    if user is not None and user.is_authenticated:
        view.mine_in_flight = in_flight(user.id)
    return view


def describe_request(row: RequestLog) -> dict[str, Any]:
    worker_pool = None
    if row.worker_id is not None:
        worker_pool = Worker.objects.filter(id=row.worker_id).values_list("pool__name", flat=True).first()
    return {
        "id": row.id, "at": row.at, "model": row.model, "worker": row.worker_name or "(none: not served)",
        "pool": row.pool, "status": row.status, "error_code": row.error_code, "client": row.client,
        "user_agent": row.user_agent, "ttft_ms": row.ttft_ms, "total_ms": row.total_ms,
        "queue_wait_ms": row.queue_wait_ms, "tokens_per_s": row.tokens_per_s,
        "prompt_tokens_per_s": row.prompt_tokens_per_s, "prompt_tokens": row.prompt_tokens,
        "completion_tokens": row.completion_tokens, "cached_tokens": row.cached_tokens, "retries": row.retries,
        "why": why_chosen(retries=row.retries, request_pool=row.pool, worker_pool=worker_pool,
                          queue_wait_ms=row.queue_wait_ms, cached_tokens=row.cached_tokens,
                          scheduler_reason=row.route_reason)
        if row.worker_name else [],
    }


def last_request(user_id: int) -> dict[str, Any] | None:
    row = RequestLog.objects.filter(user_id=user_id).order_by("-at", "-id").first()
    return None if row is None else describe_request(row)


def editor_panel(user_id: int) -> dict[str, Any]:
    found = evidence.editor_requests(evidence.own_requests(user_id), limit=200)
    latest = [{"kind": EDITOR_LABELS[kind], **describe_request(row)} for row, kind in found[:5]]
    return {"requests": latest}


def benchmark_panel(user_id: int | None) -> dict[str, Any]:
    mine = []
    if user_id is not None:
        since = timezone.now() - timedelta(days=7)
        rows = evidence.served(evidence.own_requests(user_id)).filter(at__gte=since, ttft_ms__isnull=False)
        mine = list(rows.filter(stream=True).order_by("-at").values(
            "id", "request_id", "at", "model", "worker_name", "ttft_ms", "tokens_per_s", "prompt_tokens",
            "prompt_tokens_per_s", "cached_tokens")[:5])
    # The gateway's TTFT stays hidden until the student's own measurement is in: the step asks them to
    # measure it, not to copy it from here.
    measured = user_id is not None and StepDone.objects.filter(user_id=user_id, step__in=TTFT_STEPS).exists()
    return {"run": research_bridge.latest_benchmark(), "mine": mine, "show_ttft": measured}
