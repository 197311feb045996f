"""Admission: from "this request wants model M in pool P" to a claimed worker slot.

Each gateway process keeps one fair queue per (pool, model). A request first tries to claim a
slot directly, but only when nobody is waiting (no barging past waiting classmates); otherwise
it joins its student's line, and a pump serves the lines round-robin whenever a slot may have
come free (a release in this process, or every POLL_INTERVAL_S for releases elsewhere and
expired leases). Claiming itself is atomic in live state, so several processes share slots
correctly; fairness holds within each process.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.conf import settings

from fleet.models import PoolEvent
from fleet.scheduler import Decision, WorkerView, rank_workers
from fleet.selectors import fleet_snapshot
from core import errors
from inference.fair_queue import FairQueue
from inference.metrics import QUEUE_WAIT
from core.db import fresh_connection
from core.live import LiveStateUnavailable, live_state, worker_resource

log = logging.getLogger("ocs.admission")

# English text and code average 3.5-4.5 bytes per token with Llama-family tokenizers: a body of N
# bytes (JSON syntax included) holds fewer than N / 4 tokens of prompt, usually.
BYTES_PER_TOKEN = 4
POLL_INTERVAL_S = 0.05
PUMP_RETRY_S = 0.2
WATCHDOG_S = 1.0
LENT_EVENT_EVERY_S = 60.0


@dataclass
class Lease:
    """A claimed unit of capacity (a worker slot, a key's concurrency), renewed while held."""

    resource: str
    lease_id: str
    _keeper: asyncio.Task[None] | None = None
    _released: bool = False

    def keep(self) -> "Lease":
        lease_s = settings.OCS["SLOT_LEASE_S"]

        async def renew_forever() -> None:
            while True:
                await asyncio.sleep(lease_s / 3)
                try:
                    await live_state().renew(self.resource, self.lease_id, lease_s)
                except LiveStateUnavailable:
                    pass  # try again next time; the request itself goes on

        self._keeper = asyncio.ensure_future(renew_forever())
        return self

    async def release(self) -> None:
        """Stop renewing, then free. If live state cannot be reached, the lease runs out by
        itself within SLOT_LEASE_S: nothing renews it any more."""
        if self._released:
            return
        self._released = True
        if self._keeper is not None:
            self._keeper.cancel()
        try:
            await live_state().release(self.resource, self.lease_id)
        except LiveStateUnavailable:
            log.warning("could not release %s (live state unavailable): it expires by itself", self.resource)


@dataclass
class Slot:
    """A claimed worker slot. `index` is llama-server's slot (`id_slot`; None: not pinned, only in
    tests); `own_prefix`: that slot's cache holds this student's own prompt, so the worker may
    reuse it (core/slot_owners.py). Otherwise the request must not reuse the cache at all."""

    worker: WorkerView
    lease: Lease
    reason: str
    index: int | None = None
    own_prefix: bool = False

    async def release(self) -> None:
        await self.lease.release()
        _slot_freed(self.worker)


@dataclass
class Want:
    """One request's wish: which model, for whom, and what it already tried."""

    user_id: int
    pool_id: int
    model_id: str
    conversation: str | None = None
    failed: dict[int, str] = field(default_factory=dict)
    prompt_bytes: int = 0  # the request body's size: a rough upper bound of the prompt's tokens
    min_context: int = 0  # learnt from a worker that could not hold the prompt
    pinned_worker: str = ""  # staff only (X-OCS-Worker): this worker or none, no failover
    arrived: float = field(default_factory=time.monotonic)
    queued_s: float = 0.0  # time spent waiting for slots, over every try

    def avoid(self) -> frozenset[int]:
        return frozenset(self.failed)


@dataclass(eq=False)
class _Waiter:
    want: Want
    future: asyncio.Future[Slot]


class _Line:
    def __init__(self) -> None:
        self.queue: FairQueue[_Waiter] = FairQueue()
        self.wake = asyncio.Event()
        self.pump: asyncio.Task[None] | None = None


_lines: dict[tuple[int, int, str], _Line] = {}
_last_lent_event: dict[tuple[int, str], float] = {}
_background: set[asyncio.Task[None]] = set()


def _line_for(pool_id: int, model_id: str) -> _Line:
    key = (id(asyncio.get_running_loop()), pool_id, model_id)
    line = _lines.get(key)
    if line is None:
        line = _lines[key] = _Line()
    return line


def _slot_freed(worker: WorkerView) -> None:
    for (loop_id, _pool, model_id), line in _lines.items():
        if model_id == worker.model_id and len(line.queue):
            line.wake.set()


PROCESS_ID = f"{socket.gethostname()}:{os.getpid()}"
QUEUE_REPORT_TTL_S = 30.0


def queue_depths() -> dict[str, int]:
    """Waiting requests in this process by "pool id:model id"."""
    depths: dict[str, int] = {}
    for (_loop, pool, model), line in _lines.items():
        depths[f"{pool}:{model}"] = depths.get(f"{pool}:{model}", 0) + len(line.queue)
    return depths


async def _publish_queue_depths() -> None:
    """Queue depths go to live state whenever a queue changes (only requests that wait pay for
    it), under this process's own key with a TTL: a process that dies takes its numbers along."""
    await live_state().publish_queue(PROCESS_ID, queue_depths(), QUEUE_REPORT_TTL_S)


async def rank(want: Want) -> Decision:
    """The scheduler's ranking for `want`, over the fleet snapshot and the live load."""
    snapshot = await fleet_snapshot()
    workers = snapshot.workers
    if want.pinned_worker:
        workers = [w for w in workers if w.name == want.pinned_worker]
    ids = [w.id for w in workers if w.model_id == want.model_id]
    view = await live_state().view(ids, want.conversation)
    return rank_workers(
        workers=workers,
        busy=view.busy,
        model_id=want.model_id,
        pool_id=want.pool_id,
        avoid=want.avoid(),
        suspects=view.suspects,
        affinity_worker_id=view.affinity_worker_id,
        lending_pool_ids=snapshot.lending_pool_ids,
        min_context=want.min_context,
        prompt_tokens_estimate=want.prompt_bytes // BYTES_PER_TOKEN,
    )


async def try_claim(want: Want) -> Slot | None:
    """Claim a slot on the best worker with one free, or None if all are busy.
    Raises when no worker could ever serve (none routable)."""
    decision = await rank(want)
    live = live_state()
    if not decision.ranked:
        if want.failed:
            raise errors.upstream_failed("; ".join(want.failed.values()))
        raise errors.no_worker_available(want.model_id)
    lease_s = settings.OCS["SLOT_LEASE_S"]
    for candidate in decision.ranked:
        if candidate.free <= 0:
            continue
        resource = worker_resource(candidate.worker.id)
        claim = await live.claim_slot(resource, candidate.worker.slots, lease_s, student=str(want.user_id),
                                      conversation=want.conversation or "")
        if claim is not None:
            if decision.lent_by:
                _record_lent(want.pool_id, decision.lent_by, candidate.worker)
            return Slot(worker=candidate.worker, lease=Lease(resource, claim.lease_id).keep(), reason=candidate.reason,
                        index=claim.index, own_prefix=claim.own_prefix)
    return None


async def acquire_slot(want: Want) -> Slot:
    """A claimed slot for `want`, waiting fairly up to QUEUE_MAX_WAIT_S, else 429."""
    started = time.monotonic()
    try:
        slot = await _acquire(want)
    finally:
        want.queued_s += time.monotonic() - started
    QUEUE_WAIT.labels(want.model_id).observe(time.monotonic() - started)
    return slot


async def _acquire(want: Want) -> Slot:
    line = _line_for(want.pool_id, want.model_id)
    if not len(line.queue):
        slot = await try_claim(want)
        if slot is not None:
            return slot
    waiter = _Waiter(want=want, future=asyncio.get_running_loop().create_future())
    line.queue.push(want.user_id, waiter)
    await _publish_queue_depths()
    _ensure_pump(line)
    line.wake.set()
    max_wait_s = settings.OCS["QUEUE_MAX_WAIT_S"]
    started = time.monotonic()
    served = False
    try:
        slot = await _await_served(line, waiter, deadline=started + max_wait_s)
        served = True
        return slot
    except asyncio.TimeoutError:
        raise errors.queue_timeout(want.model_id, time.monotonic() - started,
                                   retry_after_s=max(1, int(settings.OCS["SLOT_LEASE_S"] // 3))) from None
    finally:
        # Gave up (timeout, or the client went away and this task was cancelled).
        if not served and not line.queue.remove(want.user_id, waiter):
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                await future.result().release()  # served in the same instant: hand the slot back
        waiter.future.cancel()
        await _publish_queue_depths()


async def _await_served(line: _Line, waiter: _Waiter, *, deadline: float) -> Slot:
    """Wait for the pump to serve `waiter`; every WATCHDOG_S make sure a pump still runs, so
    that no unforeseen failure of one can leave waiters starving until their deadline."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise asyncio.TimeoutError
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout=min(left, WATCHDOG_S))
        except asyncio.TimeoutError:
            if time.monotonic() >= deadline:
                raise
            _ensure_pump(line)


async def _pump(line: _Line) -> None:
    """Serve waiters round-robin while any wait."""
    while len(line.queue):
        waiter = line.queue.peek()
        assert waiter is not None
        student = waiter.want.user_id
        if waiter.future.done():  # its request gave up; acquire_slot removes it
            line.queue.take(student, waiter)
            continue
        try:
            slot = await try_claim(waiter.want)
        except errors.ApiError as error:
            if line.queue.take(student, waiter) and not waiter.future.done():
                waiter.future.set_exception(error)
            continue
        except Exception:
            # A transient failure (the database busy, Redis restarting) must not end the pump:
            # nobody awaits it, so it would die silently and the waiters would starve until a
            # new arrival started another. Log, back off, serve on; each waiter's own deadline
            # still bounds its wait.
            log.exception("admission pump: claiming a slot failed; retrying")
            await asyncio.sleep(PUMP_RETRY_S)
            continue
        if slot is not None:
            # The queue may have changed during the await: take this very waiter, not the head.
            if line.queue.take(student, waiter) and not waiter.future.done():
                waiter.future.set_result(slot)
            else:
                await slot.release()
            continue
        line.wake.clear()
        try:
            await asyncio.wait_for(line.wake.wait(), timeout=POLL_INTERVAL_S)
        except asyncio.TimeoutError:
            pass


def _ensure_pump(line: _Line) -> None:
    if line.pump is None or line.pump.done():
        line.pump = asyncio.ensure_future(_pump(line))


def _record_lent(pool_id: int, lent_by: tuple[str, ...], worker: WorkerView) -> None:
    """Note, at most once a minute per process, that a pool ran on borrowed workers."""
    key = (pool_id, ",".join(lent_by))
    now = time.monotonic()
    if now - _last_lent_event.get(key, -LENT_EVENT_EVERY_S) < LENT_EVENT_EVERY_S:
        return
    _last_lent_event[key] = now
    log.warning("pool %s has no healthy worker: using workers lent by %s", pool_id, ", ".join(lent_by))

    @fresh_connection
    def write() -> None:
        PoolEvent.objects.create(
            pool_id=pool_id, kind="lent",
            detail=f"no healthy worker of its own; served by {worker.name} of pool {', '.join(lent_by)}",
        )

    task = asyncio.ensure_future(sync_to_async(write, thread_sensitive=False)())
    _background.add(task)
    task.add_done_callback(_background.discard)
