"""The worker slot's rules in the live state, on both back ends: the slot claim and its owners
(slot_owners.py), the fair line (fair_share.py), conversation affinity, the scheduler's view and
the shared prefix's senders (shared_prefix.py). Subclasses of core/live.py's mechanism: the roof
composes them with the quota's (ocsweb/live.py), and `admission_live()` hands them to the line.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from core.live import (
    InProcessLiveState,
    LiveState,
    RedisLiveState,
    SettlementPart,
    guarded,
    live_state,
    round_trip,
    worker_resource,
)
from inference.admission.fair_share import (
    JOIN_LUA,
    ORDER_LUA,
    SERVED_LUA,
    TURN_LUA,
    Waiting,
    check_policy,
    lifted,
    order,
    order_local,
    pick,
)
from inference.admission.slot_owners import (
    CLAIM_SLOT_LUA,
    CONFIRM_SLOT_LUA,
    PENDING,
    SLOT_SEPARATOR,
    SlotClaim,
    SlotOwner,
    handover,
    holds_own_prefix,
    lease_slot,
    lease_student,
    lease_token,
    pick_slot,
)

# The live-state key holding the fair-sharing policy set at run time (overrides OCS_FAIR_POLICY).
FAIR_POLICY_KEY = "fair:policy"
FAIR_COUNTER_TTL_S = 24 * 3600.0

# How long a slot's owner is remembered. Forgetting is safe (a slot with no owner counts as
# foreign: no reuse), so this only bounds memory; llama-server keeps a slot's cache until reused.
SLOT_OWNER_TTL_S = 24 * 3600.0


@dataclass(frozen=True)
class LiveView:
    """What the scheduler needs from live state, read in one round trip."""

    busy: dict[int, int]
    suspects: frozenset[int]
    affinity_worker_id: int | None
    # Asked for with `fair_line`: the request whose turn it is in that shared line (None: nobody
    # waits), read in the same round trip, so an uncontended request costs no extra one.
    fair_turn: str | None = None


@dataclass(frozen=True)
class FairCharge:
    """A request's part of its end: the correction of its fair-share charge (line.py's
    `fair_settlement`), applied with the rest of the end in one round trip."""

    line: str
    policy: str
    student: str
    amount: float

    @property
    def empty(self) -> bool:
        return not self.amount


class AdmissionLiveState(LiveState, Protocol):
    # `affinity` (worker id, ttl s): a claim also records the conversation's worker, in the same round trip.
    # `first`, `prefer`: the light lane (inference/admission/rules.py lane()); a request given `prefer`
    # is a light one, which skips the slot-file steps (inference/admission/slot_owners.handover).
    async def claim_slot(self, resource: str, capacity: int, lease_s: float, *, student: str,
                         conversation: str, affinity: tuple[int, float] | None = None, first: int = 0,
                         prefer: int | None = None) -> SlotClaim | None: ...
    # After a handover: the worker has processed `student`'s prompt in slot `index`; they own it now.
    async def confirm_slot(self, resource: str, index: int, *, student: str, conversation: str) -> None: ...
    # The waiting line of a (pool, model), one for every gateway process, and its service counters
    # (inference/admission/fair_share.py). A waiting entry lives `ttl_s` unless renewed.
    async def fair_join(self, line: str, policy: str, *, request: str, student: str, weight: float,
                        cost: float, ttl_s: float, worker: int | None = None) -> None: ...
    async def fair_turn(self, line: str, policy: str) -> str | None: ...
    async def fair_order(self, line: str, policy: str, limit: int, *,
                         local: tuple[float, list[int]] | None = None) -> list[str]: ...
    async def fair_served(self, line: str, policy: str, *, request: str, student: str, amount: float) -> bool: ...
    async def fair_leave(self, line: str, request: str) -> None: ...
    async def fair_renew(self, line: str, requests: list[str], ttl_s: float) -> None: ...
    async def fair_charge(self, line: str, policy: str, *, student: str, amount: float) -> None: ...
    # Many charges in one round trip (inference/admission/streamed.py: what a process's streams relayed).
    async def fair_charges(self, charges: list[FairCharge]) -> None: ...
    async def fair_policy(self) -> str | None: ...
    def set_fair_policy(self, policy: str | None) -> None: ...
    async def view(self, worker_ids: list[int], conversation: str | None, *, fair_line: str = "",
                   fair_policy: str = "") -> LiveView: ...
    async def set_affinity(self, conversation: str, worker_id: int, ttl_s: float) -> None: ...
    async def slot_share(self, resources: list[str], line: str, student: str) -> tuple[int, bool]: ...
    async def prefix_senders(self, names: list[str], student: str, ttl_s: float) -> list[int]: ...


class InProcessAdmission(InProcessLiveState):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._affinity: dict[str, tuple[int, float]] = {}
        self._prefix_senders: dict[str, tuple[set[str], float]] = {}
        self._slot_owners: dict[str, dict[int, SlotOwner]] = {}
        self._slot_files: dict[str, set[str]] = {}
        self._fair_waiting: dict[str, dict[str, tuple[Waiting, float]]] = {}
        self._fair_counters: dict[tuple[str, str], dict[str, float]] = {}
        self._fair_policy: str | None = None

    async def claim_slot(self, resource: str, capacity: int, lease_s: float, *, student: str,
                         conversation: str, affinity: tuple[int, float] | None = None, first: int = 0,
                         prefer: int | None = None) -> SlotClaim | None:
        """A lease on one slot of a worker (inference/admission/slot_owners.py: which one, whose cache it holds,
        and the slot-file steps of the handover)."""
        claim = self._claim_slot(resource, capacity, lease_s, student=student, conversation=conversation,
                                 first=first, prefer=prefer)
        if claim is not None and affinity is not None and conversation:
            await self.set_affinity(conversation, *affinity)
        return claim

    def _claim_slot(self, resource: str, capacity: int, lease_s: float, *, student: str,
                    conversation: str, first: int = 0, prefer: int | None = None) -> SlotClaim | None:
        with self._lock:
            leases = self._live_leases(resource)
            if len(leases) >= capacity:
                return None
            used = {index for index in map(lease_slot, leases) if index is not None}
            owners = self._slot_owners.setdefault(resource, {})
            index = pick_slot(capacity=capacity, used=used, owners=owners, student=student, conversation=conversation,
                              first=first, prefer=prefer)
            if index is None:
                return None
            previous = owners.get(index)
            lease_id = f"{index}{SLOT_SEPARATOR}{lease_token(student, uuid.uuid4().hex)}"
            now = self._clock()
            leases[lease_id] = now + lease_s
            files = self._slot_files.setdefault(resource, set())
            keep, restore = handover(previous, student, files, light=prefer is not None, lane_slot=index == prefer)
            if not holds_own_prefix(previous, student):
                owners[index] = SlotOwner(student=PENDING, conversation="", last_used_ms=int(now * 1000))
                if keep:
                    files.add(keep)
                return SlotClaim(lease_id=lease_id, index=index, own_prefix=False, previous=keep, restore=restore)
            owners[index] = SlotOwner(student=student, conversation=conversation, last_used_ms=int(now * 1000))
            return SlotClaim(lease_id=lease_id, index=index, own_prefix=True)

    async def confirm_slot(self, resource: str, index: int, *, student: str, conversation: str) -> None:
        with self._lock:
            self._slot_owners.setdefault(resource, {})[index] = SlotOwner(
                student=student, conversation=conversation, last_used_ms=int(self._clock() * 1000))

    def _waiting(self, line: str) -> dict[str, tuple[Waiting, float]]:
        waiting = self._fair_waiting.setdefault(line, {})
        now = self._clock()
        for request in [r for r, (_, until) in waiting.items() if until <= now]:
            del waiting[request]
        return waiting

    async def fair_join(self, line: str, policy: str, *, request: str, student: str, weight: float,
                        cost: float, ttl_s: float, worker: int | None = None) -> None:
        with self._lock:
            waiting = self._waiting(line)
            counters = self._fair_counters.setdefault((policy, line), {})
            entries = [entry for entry, _ in waiting.values()]
            if all(entry.student != student for entry in entries):
                counters[student] = lifted(counters, entries, student)
            waiting[request] = (Waiting(request=request, student=student, arrived=self._clock(), weight=weight,
                                        cost=cost, worker=worker), self._clock() + ttl_s)

    async def fair_turn(self, line: str, policy: str) -> str | None:
        with self._lock:
            chosen = pick((entry for entry, _ in self._waiting(line).values()),
                          self._fair_counters.get((policy, line), {}))
            return chosen.request if chosen else None

    async def fair_order(self, line: str, policy: str, limit: int, *,
                         local: tuple[float, list[int]] | None = None) -> list[str]:
        """The line's first `limit` requests in order; with `local` (bound, workers with a free
        slot), fair_share.order_local's order."""
        with self._lock:
            entries = [entry for entry, _ in self._waiting(line).values()]
            counters = self._fair_counters.get((policy, line), {})
            ranked = (order(entries, counters) if local is None
                      else order_local(entries, counters, free_workers=local[1], bound=local[0]))
            return [entry.request for entry in ranked[:limit]]

    async def fair_served(self, line: str, policy: str, *, request: str, student: str, amount: float) -> bool:
        with self._lock:
            if self._fair_waiting.get(line, {}).pop(request, None) is None:
                return False
            counters = self._fair_counters.setdefault((policy, line), {})
            counters[student] = counters.get(student, 0.0) + amount
            return True

    async def fair_leave(self, line: str, request: str) -> None:
        with self._lock:
            self._fair_waiting.get(line, {}).pop(request, None)

    async def fair_renew(self, line: str, requests: list[str], ttl_s: float) -> None:
        with self._lock:
            waiting = self._fair_waiting.get(line, {})
            for request in requests:
                if request in waiting:
                    waiting[request] = (waiting[request][0], self._clock() + ttl_s)

    async def fair_charge(self, line: str, policy: str, *, student: str, amount: float) -> None:
        with self._lock:
            counters = self._fair_counters.setdefault((policy, line), {})
            counters[student] = counters.get(student, 0.0) + amount

    async def fair_charges(self, charges: list[FairCharge]) -> None:
        for part in charges:
            await self.fair_charge(part.line, part.policy, student=part.student, amount=part.amount)

    async def fair_policy(self) -> str | None:
        return self._fair_policy

    def set_fair_policy(self, policy: str | None) -> None:
        """In process: reaches this process only (the embedded default runs one gateway process)."""
        self._fair_policy = None if policy is None else check_policy(policy)

    async def view(self, worker_ids: list[int], conversation: str | None, *, fair_line: str = "",
                   fair_policy: str = "") -> LiveView:
        busy = await self.busy([worker_resource(w) for w in worker_ids])
        affinity = None
        if conversation is not None:
            entry = self._affinity.get(conversation)
            if entry and entry[1] > self._clock():
                affinity = entry[0]
        return LiveView(
            busy={w: busy[worker_resource(w)] for w in worker_ids},
            suspects=self.suspects_sync(),
            affinity_worker_id=affinity,
            fair_turn=await self.fair_turn(fair_line, fair_policy) if fair_line else None,
        )

    async def set_affinity(self, conversation: str, worker_id: int, ttl_s: float) -> None:
        with self._lock:
            if len(self._affinity) > 100_000:  # bound memory: drop expired entries
                now = self._clock()
                self._affinity = {k: v for k, v in self._affinity.items() if v[1] > now}
            self._affinity[conversation] = (worker_id, self._clock() + ttl_s)

    async def slot_share(self, resources: list[str], line: str, student: str) -> tuple[int, bool]:
        """(slots of these workers `student` holds now, whether another student waits in `line`)."""
        with self._lock:
            held = sum(1 for resource in resources for lease_id in self._live_leases(resource)
                       if lease_student(lease_id) == student)
            others = any(entry.student != student for entry, _ in self._waiting(line).values())
        return held, others

    async def prefix_senders(self, names: list[str], student: str, ttl_s: float) -> list[int]:
        """Adds `student` to the senders of each shared-prefix block (inference/admission/shared_prefix.py) and
        returns how many distinct students sent each, within the last `ttl_s` of its sends."""
        with self._lock:
            now = self._clock()
            if len(self._prefix_senders) > 100_000:  # bound memory: drop expired entries
                self._prefix_senders = {k: v for k, v in self._prefix_senders.items() if v[1] > now}
            counts = []
            for name in names:
                senders, until = self._prefix_senders.get(name, (set(), 0.0))
                if until <= now:
                    senders = set()
                senders.add(student)
                self._prefix_senders[name] = (senders, now + ttl_s)
                counts.append(len(senders))
            return counts

    def _settle(self, part: SettlementPart) -> None:
        if not isinstance(part, FairCharge):
            return super()._settle(part)
        with self._lock:
            counters = self._fair_counters.setdefault((part.policy, part.line), {})
            counters[part.student] = counters.get(part.student, 0.0) + part.amount
        return None


class RedisAdmission(RedisLiveState):
    @round_trip
    async def claim_slot(self, resource: str, capacity: int, lease_s: float, *, student: str,
                         conversation: str, affinity: tuple[int, float] | None = None, first: int = 0,
                         prefer: int | None = None) -> SlotClaim | None:
        now_ms = int(time.time() * 1000)
        token = lease_token(student, uuid.uuid4().hex)
        keys = [self._k("lease", resource), self._k("slot_owners", resource)]
        args: list[object] = [capacity, now_ms, now_ms + int(lease_s * 1000), token, student, conversation,
                              int(SLOT_OWNER_TTL_S * 1000), first, -1 if prefer is None else prefer]
        if affinity is not None and conversation and affinity[1] > 0:
            keys.append(self._k("affinity", conversation))
            args += [affinity[0], int(affinity[1] * 1000)]
        index, own, previous, restore = await self._client().eval(CLAIM_SLOT_LUA, len(keys), *keys, *args)
        if int(index) < 0:
            return None
        previous = previous.decode() if isinstance(previous, bytes) else str(previous or "")
        return SlotClaim(lease_id=f"{int(index)}.{token}", index=int(index), own_prefix=int(own) == 1,
                         previous=previous, restore=int(restore) == 1)

    @round_trip
    async def confirm_slot(self, resource: str, index: int, *, student: str, conversation: str) -> None:
        await self._client().eval(CONFIRM_SLOT_LUA, 1, self._k("slot_owners", resource), str(index),
                                  f"{student}|{conversation}|{int(time.time() * 1000)}", int(SLOT_OWNER_TTL_S * 1000))

    def _fair_keys(self, line: str, policy: str) -> list[str]:
        return [self._k("fair", "wait", line), self._k("fair", "alive", line), self._k("fair", "ctr", policy, line)]

    @round_trip
    async def fair_join(self, line: str, policy: str, *, request: str, student: str, weight: float,
                        cost: float, ttl_s: float, worker: int | None = None) -> None:
        now_ms = int(time.time() * 1000)
        await self._client().eval(JOIN_LUA, 3, *self._fair_keys(line, policy), request, student, repr(float(weight)),
                                  now_ms, now_ms + int(ttl_s * 1000), now_ms, int(FAIR_COUNTER_TTL_S * 1000),
                                  repr(float(cost)), "" if worker is None else str(worker))

    @round_trip
    async def fair_turn(self, line: str, policy: str) -> str | None:
        chosen = await self._client().eval(TURN_LUA, 3, *self._fair_keys(line, policy), int(time.time() * 1000))
        return chosen.decode() if chosen else None

    @round_trip
    async def fair_order(self, line: str, policy: str, limit: int, *,
                         local: tuple[float, list[int]] | None = None) -> list[str]:
        bound, free = local if local is not None else (-1.0, [])
        chosen = await self._client().eval(ORDER_LUA, 3, *self._fair_keys(line, policy), int(time.time() * 1000), limit,
                                           repr(float(bound)), *[str(w) for w in free])
        return [request.decode() if isinstance(request, bytes) else str(request) for request in chosen or []]

    @round_trip
    async def fair_served(self, line: str, policy: str, *, request: str, student: str, amount: float) -> bool:
        served = await self._client().eval(SERVED_LUA, 3, *self._fair_keys(line, policy), request, student,
                                           repr(float(amount)), int(FAIR_COUNTER_TTL_S * 1000))
        return int(served) == 1

    @round_trip
    async def fair_leave(self, line: str, request: str) -> None:
        pipe = self._client().pipeline(transaction=True)
        pipe.hdel(self._k("fair", "wait", line), request)
        pipe.zrem(self._k("fair", "alive", line), request)
        await pipe.execute()

    @round_trip
    async def fair_renew(self, line: str, requests: list[str], ttl_s: float) -> None:
        if requests:
            until_ms = int((time.time() + ttl_s) * 1000)
            await self._client().zadd(self._k("fair", "alive", line), {r: until_ms for r in requests}, xx=True)

    @round_trip
    async def fair_charge(self, line: str, policy: str, *, student: str, amount: float) -> None:
        key = self._k("fair", "ctr", policy, line)
        pipe = self._client().pipeline(transaction=False)
        pipe.hincrbyfloat(key, student, float(amount))
        pipe.pexpire(key, int(FAIR_COUNTER_TTL_S * 1000))
        await pipe.execute()

    @round_trip
    async def fair_charges(self, charges: list[FairCharge]) -> None:
        pipe = self._client().pipeline(transaction=False)
        keys = set()
        for part in charges:
            key = self._k("fair", "ctr", part.policy, part.line)
            pipe.hincrbyfloat(key, part.student, float(part.amount))
            keys.add(key)
        for key in keys:
            pipe.pexpire(key, int(FAIR_COUNTER_TTL_S * 1000))
        await pipe.execute()

    @round_trip
    async def fair_policy(self) -> str | None:
        value = await self._client().get(self._k(FAIR_POLICY_KEY))
        return value.decode() if value else None

    @guarded
    def set_fair_policy(self, policy: str | None) -> None:
        """Reaches every gateway process on this Redis (each reads it at most once a second)."""
        if policy is None:
            self._sync.delete(self._k(FAIR_POLICY_KEY))
        else:
            self._sync.set(self._k(FAIR_POLICY_KEY), check_policy(policy))

    @round_trip
    async def view(self, worker_ids: list[int], conversation: str | None, *, fair_line: str = "",
                   fair_policy: str = "") -> LiveView:
        now_ms = int(time.time() * 1000)
        pipe = self._client().pipeline(transaction=False)
        for worker_id in worker_ids:
            pipe.zcount(self._k("lease", worker_resource(worker_id)), now_ms + 1, "+inf")
        pipe.zrangebyscore(self._k("suspects"), now_ms + 1, "+inf")
        if conversation is not None:
            pipe.get(self._k("affinity", conversation))
        if fair_line:
            pipe.eval(TURN_LUA, 3, *self._fair_keys(fair_line, fair_policy), now_ms)
        results = await pipe.execute()
        counts = results[: len(worker_ids)]
        suspects = frozenset(int(s) for s in results[len(worker_ids)])
        affinity_raw = results[len(worker_ids) + 1] if conversation is not None else None
        turn = results[-1] if fair_line else None
        return LiveView(
            busy={w: int(c) for w, c in zip(worker_ids, counts)},
            suspects=suspects,
            affinity_worker_id=int(affinity_raw) if affinity_raw else None,
            fair_turn=turn.decode() if turn else None,
        )

    @round_trip
    async def set_affinity(self, conversation: str, worker_id: int, ttl_s: float) -> None:
        await self._client().set(self._k("affinity", conversation), worker_id, px=int(ttl_s * 1000))

    @round_trip
    async def slot_share(self, resources: list[str], line: str, student: str) -> tuple[int, bool]:
        """(slots of these workers `student` holds now, whether another student waits in `line`),
        in one round trip."""
        now_ms = int(time.time() * 1000)
        pipe = self._client().pipeline(transaction=False)
        for resource in resources:
            pipe.zrangebyscore(self._k("lease", resource), now_ms + 1, "+inf")
        wait_key, alive_key, _ = self._fair_keys(line, "tokens")
        pipe.hgetall(wait_key)
        pipe.zrangebyscore(alive_key, now_ms + 1, "+inf")
        replies = await pipe.execute()
        held = sum(1 for members in replies[: len(resources)] for member in members
                   if lease_student(member.decode()) == student)
        alive = {request.decode() for request in replies[-1]}
        others = any(request.decode() in alive and value.decode().split("|", 1)[0] != student
                     for request, value in replies[-2].items())
        return held, others

    @round_trip
    async def prefix_senders(self, names: list[str], student: str, ttl_s: float) -> list[int]:
        """One set of student ids per block name, its TTL renewed by each send (one round trip)."""
        if not names:
            return []
        pipe = self._client().pipeline(transaction=False)
        for name in names:
            key = self._k("prefix_senders", name)
            pipe.sadd(key, student)
            pipe.pexpire(key, int(ttl_s * 1000))
            pipe.scard(key)
        replies = await pipe.execute()
        return [int(count) for count in replies[2::3]]

    def _settle(self, pipe: Any, part: SettlementPart) -> None:  # noqa: ANN401 - a redis.asyncio pipeline
        if not isinstance(part, FairCharge):
            return super()._settle(pipe, part)
        key = self._k("fair", "ctr", part.policy, part.line)
        pipe.hincrbyfloat(key, part.student, float(part.amount))
        pipe.pexpire(key, int(FAIR_COUNTER_TTL_S * 1000))
        return None


def admission_live() -> AdmissionLiveState:
    """The process's live state (core.live.live_state), with the worker slot's rules in it."""
    state = live_state()
    if not isinstance(state, (InProcessAdmission, RedisAdmission)):
        raise TypeError(f"{type(state).__name__} has no admission rules: see settings.OCS_LIVE_STATE")
    return state


def set_fair_policy(policy: str | None) -> None:
    """Switch the fair-sharing policy at run time ("tokens", "requests"; None: back to
    OCS_FAIR_POLICY). On Redis every gateway process follows within a second; on the in-process
    default only this process does (a management command in another process cannot reach it)."""
    admission_live().set_fair_policy(policy)
