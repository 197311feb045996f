"""The teacher's fleet view as one JSON-ready dict: rigs and their GPUs, workers with their live
slot use and queue, recent tokens/s, cold-start time, and the latest events. Read by the page's
first render and by the live publisher (portal/fleet_push.py); the same shape both times."""
from __future__ import annotations

from datetime import datetime, timedelta
from statistics import median
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from core.dates import moment_text
from core.db import fresh_connection
from core.live import live_state, worker_resource
from fleet.models import Pool, Rig, Worker, WorkerEvent
from inference.models import RequestLog

RECENT_RATE_WINDOW = timedelta(minutes=10)
EVENTS_SHOWN = 15
EVENTS_SCANNED = 300


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def cold_starts_s(events: list[tuple[int, float | None]]) -> dict[int, float]:
    """Per worker, its latest cold start as fleet.services.worker_set_state recorded it
    (WorkerEvent.cold_start_s: process start to first healthy probe). `events` are (worker id,
    cold_start_s), newest first. Pure."""
    result: dict[int, float] = {}
    for worker_id, seconds in events:
        if seconds is not None and worker_id not in result:
            result[worker_id] = round(seconds, 1)
    return result


@fresh_connection
def _read_database() -> dict[str, Any]:
    now = timezone.now()
    rigs = list(Rig.objects.prefetch_related("gpus"))
    workers = list(Worker.objects.select_related("pool", "model", "rig").order_by("name"))
    events = list(WorkerEvent.objects.select_related("worker").order_by("-at")[:EVENTS_SCANNED])
    rates: dict[int, list[float]] = {}
    for worker_id, tokens_per_s in RequestLog.objects.filter(
            at__gte=now - RECENT_RATE_WINDOW, worker_id__isnull=False, tokens_per_s__isnull=False).values_list(
            "worker_id", "tokens_per_s")[:5000]:
        if tokens_per_s is not None:
            rates.setdefault(worker_id, []).append(tokens_per_s)
    cold = cold_starts_s([(e.worker_id, e.cold_start_s) for e in events])
    return {
        "rigs": [{
            "name": rig.name,
            "heartbeat_age_s": round((now - rig.last_heartbeat_at).total_seconds()) if rig.last_heartbeat_at else None,
            "agent_version": rig.agent_version,
            "gpu_status": rig.gpu_status,
            "rehearsal": rig.rehearsal,
            "gpus": [{
                "index": gpu.index, "name": gpu.name, "utilization_pct": gpu.utilization_pct,
                "memory_used_mib": gpu.memory_used_mib, "memory_total_mib": gpu.memory_total_mib,
                "temperature_c": gpu.temperature_c, "power_w": round(gpu.power_w) if gpu.power_w is not None else None,
            } for gpu in rig.gpus.all()],
        } for rig in rigs],
        "workers": [{
            "id": w.id, "name": w.name, "pool": w.pool.name, "pool_id": w.pool_id, "model": w.model.public_id,
            "state": w.state, "state_since": _iso(w.state_changed_at), "slots": w.slots,
            "rig": w.rig.name if w.rig else "", "gpus": w.gpu_indices,
            "tokens_per_s": round(median(rates[w.id]), 1) if rates.get(w.id) else None,
            "cold_start_s": cold.get(w.id),
            "slot_files_pruned": w.slot_files_pruned,
            "lane_tokens": w.lane_tokens,
        } for w in workers],
        "pools": list(Pool.objects.order_by("name").values_list("name", flat=True)),
        # at_text: what the page shows (core/dates.py, school time); at stays ISO for <time datetime>.
        "events": [{"at": _iso(e.at), "at_text": moment_text(e.at, seconds=True), "worker": e.worker.name,
                    "from": e.from_state, "to": e.to_state, "reason": e.reason} for e in events[:EVENTS_SHOWN]],
    }


async def fleet_status() -> dict[str, Any]:
    """The whole view, now. Busy slots are the gateway's own leases (what the scheduler sees);
    queue depth is the requests waiting for the worker's pool and model."""
    status = await sync_to_async(_read_database, thread_sensitive=False)()
    state = live_state()
    busy = await state.busy([worker_resource(w["id"]) for w in status["workers"]])
    queues = await sync_to_async(state.queue_depths_sync, thread_sensitive=False)()
    for worker in status["workers"]:
        worker["busy"] = busy.get(worker_resource(worker["id"]), 0)
        worker["queue"] = queues.get(f"{worker.pop('pool_id')}:{worker['model']}", 0)
    return status
