"""A hand-made fleet for the live line's timelines: the given workers, ranked by the scheduler's
own rank_workers over the live load (and each conversation's worker, where given), claimed by the
real pump. Used by test_lanes.py and test_local_order.py."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping

import pytest
from django.conf import settings

from core.live import worker_resource
from fleet.scheduler import Decision, WorkerView, rank_workers
from inference.admission import line as admission
from inference.admission.line import Want
from inference.admission.rules import prompt_tokens_estimate
from ocsweb.live import SiteInProcessLiveState, SiteRedisLiveState


def live_state(kind: str) -> SiteInProcessLiveState | SiteRedisLiveState:
    """A fresh live state: "in-process", or "redis" in a namespace of its own."""
    if kind == "in-process":
        return SiteInProcessLiveState()
    return SiteRedisLiveState(settings.REDIS_URL, f"{settings.OCS_LIVE_NAMESPACE}-{uuid.uuid4().hex[:8]}")


def install(monkeypatch: pytest.MonkeyPatch, kind: str, workers: list[WorkerView], model: str, *,
            affinity: Mapping[str, int] | None = None) -> SiteInProcessLiveState | SiteRedisLiveState:
    """Point the admission line at a fresh live state of `kind` and at `workers` (of `model`, pool 1)."""
    live = live_state(kind)
    monkeypatch.setattr(admission, "admission_live", lambda: live)
    monkeypatch.setattr("core.lease.live_state", lambda: live)

    async def rank(want: Want, *, fair: tuple[str, str] | None = None) -> tuple[Decision, str | None]:
        load = await live.busy([worker_resource(w.id) for w in workers])
        turn = await live.fair_turn(*fair) if fair else None
        held = (affinity or {}).get(want.conversation or "")
        return rank_workers(workers=workers, busy={w.id: load[worker_resource(w.id)] for w in workers},
                            model_id=model, pool_id=1, affinity_worker_id=held,
                            prompt_tokens_estimate=prompt_tokens_estimate(want.prompt_bytes)), turn

    class Snapshot:
        def __init__(self) -> None:
            self.workers = workers

    async def snapshot() -> Snapshot:
        return Snapshot()

    monkeypatch.setattr(admission, "rank", rank)
    monkeypatch.setattr(admission, "fleet_snapshot", snapshot)
    monkeypatch.setattr(admission, "_publish_queue_depths", lambda: asyncio.sleep(0))
    return live
