"""Admission: from "this request wants model M in pool P" to a claimed worker slot.

One waiting line per (pool, model), kept in live state: on Redis it is one line, in one order,
for every gateway process; on the embedded default it lives in the process. A request first
tries to claim a slot directly, but only when nobody is waiting (no barging past waiting
classmates); otherwise it joins the line, and each process's pump serves its own waiters when
the line says it is their turn (inference/admission/fair_share.py: least weighted service first, or request
round-robin, by OCS_FAIR_POLICY or the live override), whenever a slot may have come free (a
release in this process, or every POLL_INTERVAL_S for releases elsewhere and expired leases).
A waiter whose process dies drops out of the line within WAITING_TTL_S. Claiming itself is
atomic in live state, so several processes share slots correctly. Every served request charges
its student's counter an estimate when it leaves the line, its output every STREAM_CHARGE_TOKENS
while it streams (`charge_streamed`, sent with the process's other streams' charges:
inference/admission/streamed.py), and is settled to its real token counts when it ends
(`share_correction`, sent by the pipeline's end() with the rest of the end). While a classmate
waits, a student holding their share of the model's slots lets the classmate have the next one
(`over_share`, checked by the pump before it claims).
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.conf import settings

from core import errors
from core.db import fresh_connection
from core.lease import Lease
from core.live import LiveStateUnavailable, Settlement, worker_resource
from fleet.models import PoolEvent
from fleet.scheduler import ROUTABLE_STATES, Decision, WorkerView, rank_workers
from fleet.selectors import fleet_snapshot
from inference.admission.fair_share import POLICIES
from inference.admission.first_come import first_come
from inference.admission.live import FairCharge, admission_live
from inference.admission.rules import (
    affinity_hold,
    claim_order,
    estimate_charge,
    lane,
    lane_share_full,
    lane_slot_free,
    may_claim_directly,
    no_worker_refusal,
    over_share,
    passes_lane,
    prompt_tokens_estimate,
    queue_timeout_retry_after_s,
    settle_amount,
    streamed_charge,
    timed_out,
    wait_deadline,
    wait_left_s,
)
from inference.admission.streamed import streamed_charges
from inference.prometheus import LANE_CLAIMS, QUEUE_WAIT

log = logging.getLogger("ocs.admission")

POLL_INTERVAL_S = 0.05
PUMP_RETRY_S = 0.2
WATCHDOG_S = 1.0
LENT_EVENT_EVERY_S = 60.0
WAITING_TTL_S = 5.0  # a waiting entry not renewed for this long (its process died) leaves the line
POLICY_REFRESH_S = 1.0  # the live policy override is read at most this often per process
PUMP_LOOKAHEAD = 16  # how far down the shared line a pump looks past waiters holding for their worker


@dataclass
class Slot:
    """A claimed worker slot. `index` is llama-server's slot (`id_slot`; None: not pinned, only in
    tests); `own_prefix`: that slot's cache holds this student's own prompt, so the worker may
    reuse it (inference/admission/slot_owners.py). Otherwise the request must not reuse the cache at all, unless
    its own slot file is restored into it first (inference/admission/slot_files.py: `previous`, `restore`).
    `handover`: the slot's owner is confirmed once the worker has processed this prompt."""

    worker: WorkerView
    lease: Lease
    reason: str
    index: int | None = None
    own_prefix: bool = False
    previous: str = ""
    restore: bool = False
    handover: bool = False

    async def release(self) -> None:
        await self.lease.release()
        _slot_freed(self.worker)

    def detach(self) -> tuple[str, str] | None:
        """The slot's lease for a request's one-round-trip end (LiveState.finish); call `freed()`
        once it is freed. None if it was released already."""
        return self.lease.detach()

    def freed(self) -> None:
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
    weight: float = 1.0  # the student's class weight in the fair share
    holding: bool = False  # its last claim waited for its conversation's worker (affinity_hold)
    capped: bool = False  # its last claim let a waiting classmate go first (over_share)
    passed: bool = False  # its last claim found only a lane worker's slot free, too short for it (passes_lane)
    lane_free: bool = False  # its last claim saw a lane worker's slot free (lane_slot_free)
    affinity_worker: int | None = None  # its conversation's worker by its last ranking (the "local" order)
    fair_policy: str = ""  # the policy its estimate was charged under ("": nothing charged yet)
    fair_charged: float = 0.0

    @property
    def line(self) -> str:
        return f"{self.pool_id}:{self.model_id}"

    def estimate(self, policy: str) -> float:
        """Its charge before it ran: the prompt by the byte estimate, as if nothing were cached."""
        return estimate_charge(policy, prompt_bytes=self.prompt_bytes, weight=self.weight)

    def avoid(self) -> frozenset[int]:
        return frozenset(self.failed)


@dataclass(eq=False)
class _Waiter:
    want: Want
    future: asyncio.Future[Slot]
    request: str = field(default_factory=lambda: uuid.uuid4().hex)  # its id in the shared line


class _Line:
    """This process's waiters of one (pool, model) line; the order is the shared line's."""

    def __init__(self, pool_id: int, model_id: str) -> None:
        self.name = f"{pool_id}:{model_id}"
        self.model_id = model_id
        self.waiters: dict[str, _Waiter] = {}
        self.wake = asyncio.Event()
        self.pump: asyncio.Task[None] | None = None
        self.renewed_at = 0.0


_lines: dict[tuple[int, int, str], _Line] = {}
_last_lent_event: dict[tuple[int, str], float] = {}
_lane_locks: dict[tuple[int, int, int], asyncio.Lock] = {}  # (event loop, lane worker, student)
_background: set[asyncio.Task[None]] = set()


def _lane_lock(worker_id: int, user_id: int) -> asyncio.Lock:
    key = (id(asyncio.get_running_loop()), worker_id, user_id)
    lock = _lane_locks.get(key)
    if lock is None:
        lock = _lane_locks[key] = asyncio.Lock()
    return lock


def _line_for(pool_id: int, model_id: str) -> _Line:
    key = (id(asyncio.get_running_loop()), pool_id, model_id)
    line = _lines.get(key)
    if line is None:
        line = _lines[key] = _Line(pool_id, model_id)
    return line


def _slot_freed(worker: WorkerView) -> None:
    for (loop_id, _pool, model_id), line in _lines.items():
        if model_id == worker.model_id and line.waiters:
            line.wake.set()


_policy_cache: tuple[str, float] | None = None


async def active_policy() -> str:
    """The fair-sharing policy in force: the live override (inference.admission.live.set_fair_policy), read at
    most once every POLICY_REFRESH_S, else OCS_FAIR_POLICY."""
    global _policy_cache
    now = time.monotonic()
    if _policy_cache is not None and now - _policy_cache[1] < POLICY_REFRESH_S:
        return _policy_cache[0]
    try:
        override = await admission_live().fair_policy()
    except LiveStateUnavailable:
        override = None
    policy = override if override in POLICIES else settings.OCS["FAIR_POLICY"]
    _policy_cache = (policy, now)
    return policy


async def share_correction(want: Want, *, computed_prompt_tokens: int, output_tokens: int) -> tuple[str, float]:
    """(policy, amount): what to add to the student's fair-share counter once the request ran,
    its real cost less the estimate charged when it left the line (0: nothing to add)."""
    policy = want.fair_policy or await active_policy()
    return policy, settle_amount(policy, charged_policy=want.fair_policy, charged=want.fair_charged,
                                 computed_prompt_tokens=computed_prompt_tokens, output_tokens=output_tokens,
                                 weight=want.weight)


async def charge_streamed(want: Want, *, output_tokens: int) -> None:
    """Charge output relayed while the answer still streams (every STREAM_CHARGE_TOKENS): the
    student's running streams weigh on their turn while classmates wait. Sent with the process's
    other streams' charges within FLUSH_S (inference/admission/streamed.py), counted in
    `want.fair_charged` once taken, so the end's settlement adds only the rest."""
    policy = want.fair_policy or await active_policy()
    streamed_charges().add(want, policy, streamed_charge(policy, output_tokens=output_tokens, weight=want.weight))


async def fair_settlement(want: Want, *, computed_prompt_tokens: int, output_tokens: int) -> Settlement:
    """A served request's fair-share correction (share_correction) as its part of the request's
    Settlement, which LiveState.finish applies with the rest in one round trip."""
    await streamed_charges().settled(want)  # its streamed charges taken or dropped, none on their way
    policy, amount = await share_correction(want, computed_prompt_tokens=computed_prompt_tokens,
                                            output_tokens=output_tokens)
    return Settlement(parts=(FairCharge(line=want.line, policy=policy, student=str(want.user_id), amount=amount),))


PROCESS_ID = f"{socket.gethostname()}:{os.getpid()}"
QUEUE_REPORT_TTL_S = 30.0


def queue_depths() -> dict[str, int]:
    """Waiting requests in this process by "pool id:model id"."""
    depths: dict[str, int] = {}
    for (_loop, pool, model), line in _lines.items():
        depths[f"{pool}:{model}"] = depths.get(f"{pool}:{model}", 0) + len(line.waiters)
    return depths


async def _publish_queue_depths() -> None:
    """Queue depths go to live state whenever a queue changes (only requests that wait pay for
    it), under this process's own key with a TTL: a process that dies takes its numbers along."""
    await admission_live().publish_queue(PROCESS_ID, queue_depths(), QUEUE_REPORT_TTL_S)


async def rank(want: Want, *, fair: tuple[str, str] | None = None) -> tuple[Decision, str | None]:
    """The scheduler's ranking for `want`, over the fleet snapshot and the live load. With
    `fair` (line, policy), also whose turn it is in that shared line (None: nobody waits), read
    in the same round trip."""
    snapshot = await fleet_snapshot()
    workers = snapshot.workers
    if want.pinned_worker:
        workers = [w for w in workers if w.name == want.pinned_worker]
    ids = [w.id for w in workers if w.model_id == want.model_id]
    line, policy = fair or ("", "")
    view = await admission_live().view(ids, want.conversation, fair_line=line, fair_policy=policy)
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
        prompt_tokens_estimate=prompt_tokens_estimate(want.prompt_bytes),
    ), view.fair_turn


async def try_claim(want: Want, *, fair: tuple[str, str] | None = None, policy: str = "",
                    pumped: bool = False, lanes_only: bool = False) -> Slot | None:
    """Claim a slot on the best worker with one free, or None if all are busy. With `fair`
    (line, policy): None also when someone waits in that shared line (the newcomer queues).
    `policy` (or fair's): the sharing policy, which says whether the light lane holds.
    `pumped` (the line's pump serving a waiter): None also when its student already holds their
    share of the model's slots and a classmate waits (over_share; one more round trip).
    `lanes_only`: claim only a lane worker's slot (the pump, behind another process's waiter).
    A student holding their share of a lane worker (lane_share_full) goes to the next candidate.
    Raises when no worker could ever serve (none routable)."""
    decision, turn = await rank(want, fair=fair)
    want.passed, want.lane_free = passes_lane(decision), lane_slot_free(decision)
    want.affinity_worker = decision.affinity_worker_id
    if fair is not None and not may_claim_directly(waiting_here=0, turn=turn):
        return None
    live = admission_live()
    refusal = no_worker_refusal(decision, want.failed)
    if refusal is not None:
        code, detail = refusal
        raise errors.upstream_failed(detail) if code == "upstream_error" else errors.no_worker_available(want.model_id)
    want.holding = affinity_hold(decision, prompt_bytes=want.prompt_bytes, waited_s=time.monotonic() - want.arrived,
                                 hold_tokens=settings.OCS["AFFINITY_WAIT_TOKENS"],
                                 hold_s=settings.OCS["AFFINITY_WAIT_S"])
    if want.holding:
        return None
    if pumped and claim_order(decision, lanes_only=lanes_only):
        held, classmates_waiting = await live.slot_share([worker_resource(c.worker.id) for c in decision.ranked],
                                                         want.line, str(want.user_id))
        want.capped = over_share(held=held, total_slots=sum(c.worker.slots for c in decision.ranked),
                                 classmates_waiting=classmates_waiting)
        if want.capped:
            return None
    lease_s = settings.OCS["SLOT_LEASE_S"]
    affinity_s = settings.OCS["AFFINITY_TTL_S"]  # 0: affinity off (nothing recorded, nothing steers)
    policy = fair[1] if fair is not None else policy
    for candidate in claim_order(decision, lanes_only=lanes_only):
        resource = worker_resource(candidate.worker.id)
        first, prefer = lane(policy=policy, slots=candidate.worker.slots, prompt_bytes=want.prompt_bytes,
                             light_tokens=settings.OCS["LIGHT_LANE_TOKENS"])
        # On a lane worker, one more round trip (short prompts only): the student's share is read
        # and the slot claimed under one lock per worker and student, so that a student's requests
        # arriving together in this process cannot both pass it (across processes they still can).
        lane_worker = bool(candidate.worker.lane_tokens)
        async with _lane_lock(candidate.worker.id, want.user_id) if lane_worker else nullcontext():
            if lane_worker:
                held, _ = await live.slot_share([resource], want.line, str(want.user_id))
                if lane_share_full(held=held, slots=candidate.worker.slots):
                    want.passed = True  # the lane's free slot is a classmate's: the next in line may take it
                    continue
            # The claim records the conversation's worker too (one round trip). If this worker then
            # fails before its first byte, the next claim (failover) records the one that served.
            claim = await live.claim_slot(resource, candidate.worker.slots, lease_s, student=str(want.user_id),
                                          conversation=want.conversation or "",
                                          affinity=(candidate.worker.id, affinity_s) if affinity_s > 0 else None,
                                          first=first, prefer=prefer)
        if claim is not None:
            if lane_worker:
                LANE_CLAIMS.labels(candidate.worker.name).inc()
            if decision.lent_by:
                _record_lent(want.pool_id, decision.lent_by, candidate.worker)
            return Slot(worker=candidate.worker, lease=Lease(resource, claim.lease_id).keep(), reason=candidate.reason,
                        index=claim.index, own_prefix=claim.own_prefix, previous=claim.previous,
                        restore=claim.restore, handover=claim.handover)
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
    live = admission_live()
    policy = await active_policy()
    if not line.waiters:  # nobody waits here; whether anyone waits elsewhere is read with the load
        async with first_come("claim"):  # in order of arrival, a few at a time
            slot = await try_claim(want, fair=(line.name, policy))
        if slot is not None:
            return slot
    waiter = _Waiter(want=want, future=asyncio.get_running_loop().create_future())
    line.waiters[waiter.request] = waiter
    served = False
    try:
        await _join(line, waiter, policy)
        await _publish_queue_depths()
        _ensure_pump(line)
        line.wake.set()
        started = time.monotonic()
        deadline = wait_deadline(started=started, max_wait_s=settings.OCS["QUEUE_MAX_WAIT_S"])
        try:
            slot = await _await_served(line, waiter, deadline=deadline)
        except asyncio.TimeoutError:
            retry_after_s = queue_timeout_retry_after_s(settings.OCS["SLOT_LEASE_S"])
            raise errors.queue_timeout(want.model_id, time.monotonic() - started, retry_after_s=retry_after_s) from None
        served = True
        return slot
    finally:
        # Gave up (timeout, or the client went away and this task was cancelled).
        if not served:
            line.waiters.pop(waiter.request, None)
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                await future.result().release()  # served in the same instant: hand the slot back
            try:
                await live.fair_leave(line.name, waiter.request)
            except LiveStateUnavailable:
                pass  # its entry is no longer renewed: it leaves the line within WAITING_TTL_S
        waiter.future.cancel()
        await _publish_queue_depths()


async def _join(line: _Line, waiter: _Waiter, policy: str) -> None:
    """Enter the shared line; under "local" with the worker that holds its conversation (read now
    when no claim of its own has ranked the workers yet: it joined behind classmates)."""
    want = waiter.want
    if policy == "local" and want.conversation and want.affinity_worker is None:
        want.affinity_worker = (await rank(want))[0].affinity_worker_id
    await admission_live().fair_join(line.name, policy, request=waiter.request, student=str(want.user_id),
                                     weight=want.weight, cost=want.estimate(policy), ttl_s=WAITING_TTL_S,
                                     worker=want.affinity_worker if policy == "local" else None)


async def _await_served(line: _Line, waiter: _Waiter, *, deadline: float) -> Slot:
    """Wait for the pump to serve `waiter`; every WATCHDOG_S make sure a pump still runs, so
    that no unforeseen failure of one can leave waiters starving until their deadline."""
    while True:
        left = wait_left_s(deadline=deadline, now=time.monotonic())
        if left <= 0:
            raise asyncio.TimeoutError
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout=min(left, WATCHDOG_S))
        except asyncio.TimeoutError:
            if timed_out(deadline=deadline, now=time.monotonic()):
                raise
            _ensure_pump(line)


async def _pump(line: _Line) -> None:
    """Serve this process's waiters when the shared line says it is their turn."""
    live = admission_live()
    while line.waiters:
        try:
            policy = await active_policy()
            if time.monotonic() - line.renewed_at > WAITING_TTL_S / 3:
                await live.fair_renew(line.name, list(line.waiters), WAITING_TTL_S)
                line.renewed_at = time.monotonic()
            local = (settings.OCS["LOCAL_BOUND"], await _free_workers(line)) if policy == "local" else None
            turns = await live.fair_order(line.name, policy, PUMP_LOOKAHEAD, local=local)
            if not turns:
                # Our waiters are not in the line (their entries expired: live state was
                # unreachable, or restarted): join again, in their order of arrival.
                for pending in sorted(line.waiters.values(), key=lambda w: w.want.arrived):
                    await _join(line, pending, policy)
                await _wait_for_wake(line)
                continue
            if not await _serve_next(line, turns, policy):
                await _wait_for_wake(line)
        except Exception:
            # A transient failure (the database busy, Redis restarting) must not end the pump:
            # nobody awaits it, so it would die silently and the waiters would starve until a
            # new arrival started another. Log, back off, serve on; each waiter's own deadline
            # still bounds its wait.
            log.exception("admission pump: serving the line failed; retrying")
            await asyncio.sleep(PUMP_RETRY_S)


async def _serve_next(line: _Line, turns: list[str], policy: str) -> bool:
    """Serve the first of `turns` (the shared line's order) that can take a slot now; True when
    the line changed (one served, refused or gone), False when it must wait for a slot. A waiter
    of this process that is waiting for its conversation's worker (affinity_hold), or that found
    only a lane worker's slot free and is too long for it (passes_lane), lets the next have the
    free slot. Another process's waiter ahead of ours is that process's to serve; behind it, ours
    may still take a lane worker's slot (only short prompts can: a long waiter ahead never could),
    while one is free."""
    live = admission_live()
    behind_other = False
    for turn in turns:
        waiter = line.waiters.get(turn)
        if waiter is None:  # another process's waiter has the turn
            if not await _has_lanes(line):
                return False
            behind_other = True
            continue
        if waiter.future.done():  # its request gave up; acquire_slot removes it
            line.waiters.pop(turn, None)
            await live.fair_leave(line.name, turn)
            return True
        try:
            slot = await try_claim(waiter.want, policy=policy, pumped=True, lanes_only=behind_other)
        except errors.ApiError as error:
            line.waiters.pop(turn, None)
            await live.fair_leave(line.name, turn)
            if not waiter.future.done():
                waiter.future.set_exception(error)
            return True
        if slot is None:
            if behind_other:
                if not waiter.want.lane_free:
                    return False  # no lane slot free for anyone: nothing more to try now
                continue
            if waiter.want.holding or waiter.want.capped or waiter.want.passed:
                continue
            return False
        want = waiter.want
        amount = want.estimate(policy)
        taken = await live.fair_served(line.name, policy, request=turn, student=str(want.user_id), amount=amount)
        # The waiter may have given up during the awaits: hand the slot back, and the charge.
        if taken and line.waiters.pop(turn, None) is waiter and not waiter.future.done():
            want.fair_policy, want.fair_charged = policy, amount
            waiter.future.set_result(slot)
        else:
            await slot.release()
            if taken:
                await live.fair_charge(line.name, policy, student=str(want.user_id), amount=-amount)
        return True
    return False


async def _free_workers(line: _Line) -> list[int]:
    """The workers of this line's model with a free slot now (one more round trip: the "local"
    order puts first the waiters whose conversation is on one of them)."""
    workers = [w for w in (await fleet_snapshot()).workers
               if w.model_id == line.model_id and w.state in ROUTABLE_STATES]
    busy = (await admission_live().view([w.id for w in workers], None)).busy
    return [w.id for w in workers if busy.get(w.id, 0) < w.slots]


async def _has_lanes(line: _Line) -> bool:
    """Whether the fleet has a lane worker for this line's model (from the cached snapshot)."""
    return any(w.lane_tokens and w.model_id == line.model_id for w in (await fleet_snapshot()).workers)


async def _wait_for_wake(line: _Line) -> None:
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
