"""The health monitor's round: probe every worker, fold in failures seen by real requests,
apply state transitions (recorded as WorkerEvents). `fleet_monitor` loops over probe_round()."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import httpx
from asgiref.sync import sync_to_async
from django.core.cache import cache

from core.live import LiveStateUnavailable, live_state
from fleet.hysteresis import HealthTracker, Observation
from fleet.worker_keys import worker_key_headers

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0
PROBE_CACHE_S = 30


@dataclass(frozen=True)
class WorkerTarget:
    id: int
    name: str
    base_url: str
    state: str
    api_key: str = field(default="", repr=False, compare=False)  # the worker's (fleet/worker_keys.py)


@dataclass
class RoundReport:
    observations: dict[str, Observation] = field(default_factory=dict)
    transitions: list[tuple[str, str, str, str]] = field(default_factory=list)  # name, from, to, reason
    busy_slots: dict[str, int] = field(default_factory=dict)


async def probe_worker(client: httpx.AsyncClient, target: WorkerTarget) -> tuple[Observation, int | None]:
    """GET /health; when healthy, /slots for how many slots are processing. Both with the worker's
    key: /health answers without one, so /slots refusing it (401) is what shows a worker launched
    with another key than the one the gateway sends, which could serve no request: not healthy."""
    headers = worker_key_headers(target.api_key)
    try:
        response = await client.get(target.base_url + "/health", timeout=PROBE_TIMEOUT_S, headers=headers)
    except httpx.HTTPError as exc:
        return Observation(ok=False, detail=f"/health: {type(exc).__name__}"), None
    if response.status_code == 503:
        return Observation(ok=False, detail="/health: 503 (loading the model)", loading=True), None
    if response.status_code != 200:
        return Observation(ok=False, detail=f"/health: status {response.status_code}"), None
    busy = None
    try:
        answer = await client.get(target.base_url + "/slots", timeout=PROBE_TIMEOUT_S, headers=headers)
        if answer.status_code == 401:
            return Observation(ok=False, detail="/slots: 401 (the worker refuses its key)"), None
        busy = sum(1 for slot in answer.json() if slot.get("is_processing"))
    except (httpx.HTTPError, ValueError, AttributeError, TypeError):
        pass  # /slots is informative only; a server started with --no-slots is still healthy
    return Observation(ok=True, detail="/health: 200"), busy


def _targets() -> list[WorkerTarget]:
    from fleet.models import Worker

    return [
        WorkerTarget(id=w.id, name=w.name, base_url=w.base_url, state=w.state, api_key=w.api_key)
        for w in Worker.objects.exclude(state=Worker.State.DISABLED).only("id", "name", "base_url", "state", "api_key")
    ]


def _apply(worker_id: int, judged: str, to_state: str, reason: str) -> tuple[str, str] | None:
    """Move the worker only if it is still in the state its probe was judged against: a worker
    that registered again (or a teacher moved) while the probe was out is judged next round, so a
    probe of the process that died never marks the one now starting down."""
    from django.db import transaction

    from fleet.models import Worker
    from fleet.services import worker_set_state

    with transaction.atomic():
        worker = Worker.objects.select_for_update().filter(id=worker_id).first()
        if worker is None or worker.state != judged:
            return None
        if worker_set_state(worker=worker, state=to_state, reason=reason):
            return judged, to_state
    return None


async def probe_round(
    tracker: HealthTracker, client: httpx.AsyncClient, previous_suspects: set[int]
) -> tuple[RoundReport, set[int]]:
    """One round over every worker that is not disabled. Returns the report and the suspect set
    to pass to the next round (a worker newly marked suspect by a real request counts as a failure)."""
    targets = await sync_to_async(_targets, thread_sensitive=False)()
    results = await asyncio.gather(*(probe_worker(client, t) for t in targets))
    try:
        suspects = set(await sync_to_async(live_state().suspects_sync, thread_sensitive=False)())
    except LiveStateUnavailable as exc:
        # Probing needs no Redis: keep judging workers by their probes while it is away.
        log.warning("suspect workers unknown this round: %s", exc)
        suspects = set(previous_suspects)
    report = RoundReport()
    for target, (observation, busy) in zip(targets, results):
        state = target.state  # as read when the round began
        if target.id in suspects - previous_suspects:
            # Seen failing by a real request since the last round: one more failure.
            state = tracker.observe(target.id, state, Observation(ok=False, detail="a request failed")) or state
        new_state = tracker.observe(target.id, state, observation)
        report.observations[target.name] = observation
        if busy is not None:
            report.busy_slots[target.name] = busy
        if new_state is not None:
            applied = await sync_to_async(_apply, thread_sensitive=False)(target.id, target.state, new_state,
                                                                          observation.detail)
            if applied:
                report.transitions.append((target.name, applied[0], applied[1], observation.detail))
    tracker.forget({t.id for t in targets})
    try:
        await sync_to_async(cache.set_many, thread_sensitive=False)(
            {f"fleet:probe:{name}": {"ok": o.ok, "detail": o.detail, "busy": report.busy_slots.get(name)}
             for name, o in report.observations.items()},
            PROBE_CACHE_S,
        )
    except Exception as exc:  # the cache (Redis) is down: the probe results are informative only
        log.warning("probe results not cached: %s: %s", type(exc).__name__, exc)
    return report, suspects
