"""Reads of the fleet for the hot path, cached per process for FLEET_CACHE_TTL_S."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings

from core.db import fresh_connection
from fleet.scheduler import WorkerView
from fleet.worker_keys import worker_request_headers


@dataclass(frozen=True)
class ModelView:
    public_id: str
    context_length: int  # tokens one request can use on the largest of the model's workers
    max_output_tokens: int
    owned_by: str
    created: int
    architecture: str = "llama"
    supports_tools: bool = True
    reasoning: bool = False


@dataclass(frozen=True)
class FleetSnapshot:
    workers: list[WorkerView]
    models: dict[str, ModelView]
    pool_ids: frozenset[int]
    lending_pool_ids: frozenset[int]
    taken_at: float


def usable_context(catalogue_context: int, worker_contexts: Iterable[int | None]) -> int:
    """Tokens one request to a model can use: the largest context per slot among its workers that
    are not disabled (a long prompt is routed to one that holds it), or the catalogue's figure
    when none reported one. What /v1/models, Ollama's show and the Connect page report."""
    known = [context for context in worker_contexts if context]
    return max(known) if known else catalogue_context


@fresh_connection
def _load_snapshot() -> FleetSnapshot:
    from fleet.models import CatalogModel, Pool, Worker

    workers = [
        WorkerView(
            id=w.id,
            name=w.name,
            base_url=w.base_url,
            pool_id=w.pool_id,
            pool_name=w.pool.name,
            model_id=w.model.public_id,
            slots=w.slots,
            state=w.state,
            lane_tokens=w.lane_tokens,
            # A rig's worker never counts for more than the teacher's catalogue figure (fleet/rigs.py
            # caps it on registration; this holds it when a teacher lowers the catalogue since).
            context=(min(w.context_per_slot, w.model.context_length) if w.rig_id and w.context_per_slot
                     else w.context_per_slot) or 0,
            upstream_headers=worker_request_headers(w.api_key),
        )
        for w in Worker.objects.select_related("pool", "model")
    ]
    contexts: dict[str, list[int]] = {}
    for worker in workers:
        if worker.state != "disabled":
            contexts.setdefault(worker.model_id, []).append(worker.context)
    models = {
        m.public_id: ModelView(
            public_id=m.public_id,
            context_length=usable_context(m.context_length, contexts.get(m.public_id, [])),
            max_output_tokens=m.max_output_tokens,
            owned_by=m.owned_by,
            created=int(m.created_at.timestamp()),
            architecture=m.architecture,
            supports_tools=m.supports_tools,
            reasoning=m.reasoning,
        )
        for m in CatalogModel.objects.all()
    }
    pools = list(Pool.objects.values_list("id", "may_lend"))
    return FleetSnapshot(
        workers=workers,
        models=models,
        pool_ids=frozenset(pool_id for pool_id, _ in pools),
        lending_pool_ids=frozenset(pool_id for pool_id, may_lend in pools if may_lend),
        taken_at=time.monotonic(),
    )


_snapshot: FleetSnapshot | None = None
_loading: asyncio.Task[FleetSnapshot] | None = None  # the refresh in flight, shared by every waiter


async def fleet_snapshot(*, fresh: bool = False, pool_id: int | None = None) -> FleetSnapshot:
    """The fleet as of at most FLEET_CACHE_TTL_S ago. `fresh` forces a reload (after a miss);
    so does a `pool_id` the snapshot does not know (a pool created since it was taken).

    Single-flight: when the snapshot expires under load, the requests arriving meanwhile wait
    for the one reload already running instead of each starting its own."""
    snapshot = _snapshot
    if (
        fresh
        or snapshot is None
        or time.monotonic() - snapshot.taken_at >= settings.OCS["FLEET_CACHE_TTL_S"]
        or (pool_id is not None and pool_id not in snapshot.pool_ids)
    ):
        snapshot = await _reload(join=not fresh)
    return snapshot


async def _reload(*, join: bool) -> FleetSnapshot:
    """Join the reload in flight (`join`), or start one; a forced reload never joins one that
    may have read the database before the change its caller is looking for."""
    global _loading
    loading = _loading
    if (not join or loading is None or loading.done()
            or loading.get_loop() is not asyncio.get_running_loop()):
        loading = _loading = asyncio.ensure_future(_load_and_keep())
    return await asyncio.shield(loading)  # a waiter that is cancelled leaves the reload running


async def _load_and_keep() -> FleetSnapshot:
    global _snapshot
    snapshot = await sync_to_async(_load_snapshot, thread_sensitive=False)()
    _snapshot = snapshot
    return snapshot


def usable_pool_ids(snapshot: FleetSnapshot, pool_id: int) -> frozenset[int]:
    """The key's own pool and the pools that may lend it workers."""
    return snapshot.lending_pool_ids | {pool_id}


def models_for_pool(snapshot: FleetSnapshot, pool_id: int) -> list[ModelView]:
    """Models a key in `pool_id` may use: those served by a worker of its pool or of a lending pool."""
    pools = usable_pool_ids(snapshot, pool_id)
    served = {w.model_id for w in snapshot.workers if w.pool_id in pools and w.state != "disabled"}
    return [snapshot.models[m] for m in sorted(served) if m in snapshot.models]
