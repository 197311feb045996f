"""Live state shared by gateway processes: leases, suspect workers, conversation affinity and
cache generations.

Two backends with one contract:
- InProcessLiveState: the embedded default (one gateway process), plain dicts;
- RedisLiveState: several gateway processes on one Redis. Claiming a lease is one Lua script,
  so two processes can never both take a worker's last slot.

A lease has an expiry, it is not a counter: if the gateway process that holds it dies, the
lease runs out and the capacity comes back. Running requests renew their leases. The same
mechanism bounds a worker's slots (resource "worker:<id>") and a student's or key's concurrent
requests (resource "conc:user:<id>", "conc:key:<id>": see core/quota.py, whose admission step
both backends run atomically).
"""
from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar
from urllib.parse import urlsplit

from prometheus_client import Counter
from redis.exceptions import RedisError

from core.fair_share import JOIN_LUA, ORDER_LUA, SERVED_LUA, TURN_LUA, Waiting, check_policy, lifted, order, pick
from core.quota import (
    ADMIT_LUA,
    QuotaAsk,
    QuotaScope,
    QuotaVerdict,
    concurrency_resource,
    counter_ttl_ms,
    decide_in_memory,
    drop_up_to,
    lua_args,
    verdict_from_lua,
)
from core.slot_owners import (
    CLAIM_SLOT_LUA,
    CONFIRM_SLOT_LUA,
    PENDING,
    SlotClaim,
    SlotOwner,
    handover,
    holds_own_prefix,
    lease_slot,
    pick_slot,
)


class LiveStateUnavailable(RuntimeError):
    """Redis, which holds the live state every gateway process shares, cannot be reached (down,
    refusing, timing out). Raised by every RedisLiveState method in place of redis-py's own
    errors. The API answers it with 503 in the client's envelope; /readyz reports it. Nothing
    needs resetting: the next call connects again, so service resumes when Redis returns."""


# How long one Redis operation may take before the request is told Redis is unavailable (s).
REDIS_CONNECT_TIMEOUT_S = 2.0
REDIS_SOCKET_TIMEOUT_S = 5.0
# Connections per gateway process. Requests beyond it wait (up to REDIS_SOCKET_TIMEOUT_S) for one
# to come free: redis-py's default pool refuses the 101st concurrent command at once, which under
# 128 streams turned into 503s (found by `manage.py bench_gateway`).
REDIS_MAX_CONNECTIONS = 256

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _describe(url: str, exc: BaseException) -> str:
    parts = urlsplit(url)
    where = parts.hostname or parts.path or "?"
    if parts.port:
        where += f":{parts.port}"
    detail = str(exc).replace(url, where)[:200] or type(exc).__name__
    return f"Redis at {where} is unavailable ({type(exc).__name__}: {detail})"


# Each RedisLiveState coroutine method is one round trip to Redis (one command, one script or
# one pipeline): counted here, so /metrics (and `bench_gateway`) can say what a request costs.
ROUND_TRIPS = Counter("ocs_live_state_round_trips", "Round trips to the shared live state (Redis), by operation",
                      ["op"])


def _guarded_async(method: Callable[_P, Awaitable[_T]]) -> Callable[_P, Coroutine[Any, Any, _T]]:
    counted = ROUND_TRIPS.labels(method.__name__)

    @functools.wraps(method)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        counted.inc()
        try:
            return await method(*args, **kwargs)
        except (RedisError, OSError) as exc:
            raise LiveStateUnavailable(_describe(args[0]._url, exc)) from exc  # type: ignore[attr-defined]
    return wrapper


def _guarded(method: Callable[_P, _T]) -> Callable[_P, _T]:
    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(*args, **kwargs)
        except (RedisError, OSError) as exc:
            raise LiveStateUnavailable(_describe(args[0]._url, exc)) from exc  # type: ignore[attr-defined]
    return wrapper


def worker_resource(worker_id: int) -> str:
    return f"worker:{worker_id}"


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
class Settlement:
    """What a request hands back when it ends, in one round trip: the leases it still holds
    (its concurrency, its slot if not freed yet), the correction of its token reservation on
    every counter it was charged on, and its fair-share charge's correction."""

    leases: tuple[tuple[str, str], ...] = ()  # (resource, lease id)
    token_scopes: tuple[str, ...] = ()
    token_periods: tuple[str, ...] = ()  # the day first, then the week's and the term's
    token_delta: int = 0
    fair_line: str = ""
    fair_policy: str = ""
    fair_student: str = ""
    fair_amount: float = 0.0
    # (scope, request id): entries to take out of the requests-per-minute windows — only when an
    # admission is undone to be done again (accounts/limits/gate.py), so the request counts once.
    window_entries: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.leases and not self.token_delta and not self.fair_amount and not self.window_entries


class LiveState(Protocol):
    async def claim(self, resource: str, capacity: int, lease_s: float) -> str | None: ...
    # `affinity` (worker id, ttl s): a claim also records the conversation's worker, in the same round trip.
    # `first`, `prefer`: the light lane (inference/admission_rules.py lane()); a request given `prefer`
    # is a light one, which skips the slot-file steps (core/slot_owners.handover).
    async def claim_slot(self, resource: str, capacity: int, lease_s: float, *, student: str,
                         conversation: str, affinity: tuple[int, float] | None = None, first: int = 0,
                         prefer: int | None = None) -> SlotClaim | None: ...
    # After a handover: the worker has processed `student`'s prompt in slot `index`; they own it now.
    async def confirm_slot(self, resource: str, index: int, *, student: str, conversation: str) -> None: ...
    async def renew_many(self, leases: list[tuple[str, str]], lease_s: float) -> None: ...
    # The waiting line of a (pool, model), one for every gateway process, and its service counters
    # (core/fair_share.py). A waiting entry lives `ttl_s` unless renewed.
    async def fair_join(self, line: str, policy: str, *, request: str, student: str, weight: float,
                        cost: float, ttl_s: float) -> None: ...
    async def fair_turn(self, line: str, policy: str) -> str | None: ...
    async def fair_order(self, line: str, policy: str, limit: int) -> list[str]: ...
    async def fair_served(self, line: str, policy: str, *, request: str, student: str, amount: float) -> bool: ...
    async def fair_leave(self, line: str, request: str) -> None: ...
    async def fair_renew(self, line: str, requests: list[str], ttl_s: float) -> None: ...
    async def fair_charge(self, line: str, policy: str, *, student: str, amount: float) -> None: ...
    async def fair_policy(self) -> str | None: ...
    def set_fair_policy(self, policy: str | None) -> None: ...
    async def release(self, resource: str, lease_id: str) -> None: ...
    async def busy(self, resources: list[str]) -> dict[str, int]: ...
    async def view(self, worker_ids: list[int], conversation: str | None, *, fair_line: str = "",
                   fair_policy: str = "") -> LiveView: ...
    async def mark_suspect(self, worker_id: int, ttl_s: float) -> None: ...
    async def set_affinity(self, conversation: str, worker_id: int, ttl_s: float) -> None: ...
    async def prefix_senders(self, names: list[str], student: str, ttl_s: float) -> list[int]: ...
    async def generation(self, name: str) -> int: ...
    def bump_generation(self, name: str) -> int: ...
    def suspects_sync(self) -> frozenset[int]: ...
    async def publish_queue(self, process: str, depths: dict[str, int], ttl_s: float) -> None: ...
    def queue_depths_sync(self) -> dict[str, int]: ...
    async def admit(self, scopes: list[QuotaScope], ask: QuotaAsk) -> QuotaVerdict: ...
    # The same, and the generation `generation_name` holds, read just before it in the same round trip.
    async def admit_seen(self, scopes: list[QuotaScope], ask: QuotaAsk,
                         generation_name: str) -> tuple[QuotaVerdict, int]: ...
    async def settle(self, scopes: list[str], day: str, delta: int, *, periods: tuple[str, ...] = ()) -> None: ...
    async def finish(self, settlement: Settlement) -> None: ...
    def tokens_used_sync(self, scope: str, day: str) -> int: ...
    async def check(self) -> None: ...


class InProcessLiveState:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._leases: dict[str, dict[str, float]] = {}
        self._suspects: dict[int, float] = {}
        self._affinity: dict[str, tuple[int, float]] = {}
        self._prefix_senders: dict[str, tuple[set[str], float]] = {}
        self._slot_owners: dict[str, dict[int, SlotOwner]] = {}
        self._slot_files: dict[str, set[str]] = {}
        self._fair_waiting: dict[str, dict[str, tuple[Waiting, float]]] = {}
        self._fair_counters: dict[tuple[str, str], dict[str, float]] = {}
        self._fair_policy: str | None = None
        self._generations: dict[str, int] = {}
        self._queues: dict[str, tuple[dict[str, int], float]] = {}
        self._windows: dict[str, OrderedDict[str, int]] = {}
        self._tokens: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def _live_leases(self, resource: str) -> dict[str, float]:
        leases = self._leases.setdefault(resource, {})
        drop_up_to(leases, self._clock())
        return leases

    async def claim(self, resource: str, capacity: int, lease_s: float) -> str | None:
        with self._lock:
            leases = self._live_leases(resource)
            if len(leases) >= capacity:
                return None
            lease_id = uuid.uuid4().hex
            leases[lease_id] = self._clock() + lease_s
            return lease_id

    async def claim_slot(self, resource: str, capacity: int, lease_s: float, *, student: str,
                         conversation: str, affinity: tuple[int, float] | None = None, first: int = 0,
                         prefer: int | None = None) -> SlotClaim | None:
        """A lease on one slot of a worker (core/slot_owners.py: which one, whose cache it holds,
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
            lease_id = f"{index}.{uuid.uuid4().hex}"
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
                        cost: float, ttl_s: float) -> None:
        with self._lock:
            waiting = self._waiting(line)
            counters = self._fair_counters.setdefault((policy, line), {})
            entries = [entry for entry, _ in waiting.values()]
            if all(entry.student != student for entry in entries):
                counters[student] = lifted(counters, entries, student)
            waiting[request] = (Waiting(request=request, student=student, arrived=self._clock(), weight=weight,
                                        cost=cost), self._clock() + ttl_s)

    async def fair_turn(self, line: str, policy: str) -> str | None:
        with self._lock:
            chosen = pick((entry for entry, _ in self._waiting(line).values()),
                          self._fair_counters.get((policy, line), {}))
            return chosen.request if chosen else None

    async def fair_order(self, line: str, policy: str, limit: int) -> list[str]:
        with self._lock:
            ranked = order((entry for entry, _ in self._waiting(line).values()),
                           self._fair_counters.get((policy, line), {}))
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

    async def fair_policy(self) -> str | None:
        return self._fair_policy

    def set_fair_policy(self, policy: str | None) -> None:
        """In process: reaches this process only (the embedded default runs one gateway process)."""
        self._fair_policy = None if policy is None else check_policy(policy)

    async def renew_many(self, leases: list[tuple[str, str]], lease_s: float) -> None:
        with self._lock:
            until = self._clock() + lease_s
            for resource, lease_id in leases:
                held = self._leases.get(resource, {})
                if lease_id in held:
                    held[lease_id] = until

    async def release(self, resource: str, lease_id: str) -> None:
        with self._lock:
            self._leases.get(resource, {}).pop(lease_id, None)

    async def busy(self, resources: list[str]) -> dict[str, int]:
        with self._lock:
            return {resource: len(self._live_leases(resource)) for resource in resources}

    def suspects_sync(self) -> frozenset[int]:
        now = self._clock()
        with self._lock:
            return frozenset(w for w, until in self._suspects.items() if until > now)

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

    async def mark_suspect(self, worker_id: int, ttl_s: float) -> None:
        with self._lock:
            self._suspects[worker_id] = self._clock() + ttl_s

    async def set_affinity(self, conversation: str, worker_id: int, ttl_s: float) -> None:
        with self._lock:
            if len(self._affinity) > 100_000:  # bound memory: drop expired entries
                now = self._clock()
                self._affinity = {k: v for k, v in self._affinity.items() if v[1] > now}
            self._affinity[conversation] = (worker_id, self._clock() + ttl_s)

    async def prefix_senders(self, names: list[str], student: str, ttl_s: float) -> list[int]:
        """Adds `student` to the senders of each shared-prefix block (core/shared_prefix.py) and
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

    async def generation(self, name: str) -> int:
        return self._generations.get(name, 0)

    def bump_generation(self, name: str) -> int:
        with self._lock:
            self._generations[name] = self._generations.get(name, 0) + 1
            return self._generations[name]

    async def publish_queue(self, process: str, depths: dict[str, int], ttl_s: float) -> None:
        with self._lock:
            self._queues[process] = ({line: d for line, d in depths.items() if d}, self._clock() + ttl_s)

    def queue_depths_sync(self) -> dict[str, int]:
        now, total = self._clock(), dict[str, int]()
        with self._lock:
            for depths, until in self._queues.values():
                if until > now:
                    for line, depth in depths.items():
                        total[line] = total.get(line, 0) + depth
        return total

    async def admit_seen(self, scopes: list[QuotaScope], ask: QuotaAsk,
                         generation_name: str) -> tuple[QuotaVerdict, int]:
        generation = self._generations.get(generation_name, 0)
        return await self.admit(scopes, ask), generation

    async def admit(self, scopes: list[QuotaScope], ask: QuotaAsk) -> QuotaVerdict:
        with self._lock:
            return decide_in_memory(scopes=scopes, ask=ask, now_ms=int(self._clock() * 1000), windows=self._windows,
                                    leases=self._leases, tokens=self._tokens)

    async def settle(self, scopes: list[str], day: str, delta: int, *, periods: tuple[str, ...] = ()) -> None:
        """`delta` on the day's counter and on each of `periods` (the week's, the term's)."""
        with self._lock:
            if len(self._tokens) > 100_000:  # bound memory: keep the current counters only
                current = {day, *periods}
                self._tokens = {k: v for k, v in self._tokens.items() if k[1] in current}
            for scope in scopes:
                for period in (day, *periods):
                    self._tokens[(scope, period)] = self._tokens.get((scope, period), 0) + delta

    async def finish(self, settlement: Settlement) -> None:
        for resource, lease_id in settlement.leases:
            await self.release(resource, lease_id)
        if settlement.token_delta and settlement.token_periods:
            await self.settle(list(settlement.token_scopes), settlement.token_periods[0], settlement.token_delta,
                              periods=settlement.token_periods[1:])
        if settlement.fair_amount:
            await self.fair_charge(settlement.fair_line, settlement.fair_policy, student=settlement.fair_student,
                                   amount=settlement.fair_amount)
        with self._lock:
            for scope, request_id in settlement.window_entries:
                self._windows.get(scope, OrderedDict()).pop(request_id, None)

    def tokens_used_sync(self, scope: str, day: str) -> int:
        return self._tokens.get((scope, day), 0)

    async def check(self) -> None:
        """In process: always available."""


# KEYS[1] = the resource's lease zset; ARGV = capacity, now_ms, expires_ms, lease_id.
_CLAIM_LUA = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) - tonumber(ARGV[2]) + 60000)
return 1
"""
# KEYS[1] = lease zset; ARGV = expires_ms, lease_id, lease_ms. Renews only a lease that still exists.
_RENEW_LUA = """
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 60000)
end
return 1
"""


class RedisLiveState:
    """Leases live in one sorted set per resource (member = lease id, score = expiry in ms);
    suspects in one sorted set (member = worker id, score = until); affinity in plain keys with
    a TTL. Expiry uses each process's wall clock: gateway hosts are NTP-synced and leases last
    tens of seconds, so a few ms of skew does not matter."""

    def __init__(self, url: str, namespace: str = "ocs") -> None:
        import redis
        import redis.asyncio as aioredis

        self._url = url
        self._ns = namespace
        # Timeouts: a Redis that hangs must fail a request within seconds, not hold it (and its
        # slot) for as long as the kernel keeps a dead connection open.
        self._timeouts = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
                          "socket_timeout": REDIS_SOCKET_TIMEOUT_S}
        self._sync = redis.Redis.from_url(url, **self._timeouts)
        self._aioredis = aioredis
        self._clients: dict[int, object] = {}

    def _client(self):  # noqa: ANN202 - redis.asyncio.Redis, bound to the running loop
        loop_id = id(asyncio.get_running_loop())
        client = self._clients.get(loop_id)
        if client is None:
            pool = self._aioredis.BlockingConnectionPool.from_url(
                self._url, max_connections=REDIS_MAX_CONNECTIONS, timeout=REDIS_SOCKET_TIMEOUT_S, **self._timeouts)
            client = self._aioredis.Redis(connection_pool=pool)
            self._clients[loop_id] = client
        return client

    @_guarded_async
    async def check(self) -> None:
        """Raises LiveStateUnavailable unless Redis answers a PING."""
        await self._client().ping()

    def _k(self, *parts: str) -> str:
        return ":".join((self._ns, *parts))

    @_guarded_async
    async def claim(self, resource: str, capacity: int, lease_s: float) -> str | None:
        now_ms = int(time.time() * 1000)
        lease_id = uuid.uuid4().hex
        claimed = await self._client().eval(
            _CLAIM_LUA, 1, self._k("lease", resource), capacity, now_ms, now_ms + int(lease_s * 1000), lease_id
        )
        return lease_id if claimed == 1 else None

    @_guarded_async
    async def claim_slot(self, resource: str, capacity: int, lease_s: float, *, student: str,
                         conversation: str, affinity: tuple[int, float] | None = None, first: int = 0,
                         prefer: int | None = None) -> SlotClaim | None:
        now_ms = int(time.time() * 1000)
        token = uuid.uuid4().hex
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

    @_guarded_async
    async def confirm_slot(self, resource: str, index: int, *, student: str, conversation: str) -> None:
        await self._client().eval(CONFIRM_SLOT_LUA, 1, self._k("slot_owners", resource), str(index),
                                  f"{student}|{conversation}|{int(time.time() * 1000)}", int(SLOT_OWNER_TTL_S * 1000))

    def _fair_keys(self, line: str, policy: str) -> list[str]:
        return [self._k("fair", "wait", line), self._k("fair", "alive", line), self._k("fair", "ctr", policy, line)]

    @_guarded_async
    async def fair_join(self, line: str, policy: str, *, request: str, student: str, weight: float,
                        cost: float, ttl_s: float) -> None:
        now_ms = int(time.time() * 1000)
        await self._client().eval(JOIN_LUA, 3, *self._fair_keys(line, policy), request, student, repr(float(weight)),
                                  now_ms, now_ms + int(ttl_s * 1000), now_ms, int(FAIR_COUNTER_TTL_S * 1000),
                                  repr(float(cost)))

    @_guarded_async
    async def fair_turn(self, line: str, policy: str) -> str | None:
        chosen = await self._client().eval(TURN_LUA, 3, *self._fair_keys(line, policy), int(time.time() * 1000))
        return chosen.decode() if chosen else None

    @_guarded_async
    async def fair_order(self, line: str, policy: str, limit: int) -> list[str]:
        chosen = await self._client().eval(ORDER_LUA, 3, *self._fair_keys(line, policy), int(time.time() * 1000), limit)
        return [request.decode() if isinstance(request, bytes) else str(request) for request in chosen or []]

    @_guarded_async
    async def fair_served(self, line: str, policy: str, *, request: str, student: str, amount: float) -> bool:
        served = await self._client().eval(SERVED_LUA, 3, *self._fair_keys(line, policy), request, student,
                                           repr(float(amount)), int(FAIR_COUNTER_TTL_S * 1000))
        return int(served) == 1

    @_guarded_async
    async def fair_leave(self, line: str, request: str) -> None:
        pipe = self._client().pipeline(transaction=True)
        pipe.hdel(self._k("fair", "wait", line), request)
        pipe.zrem(self._k("fair", "alive", line), request)
        await pipe.execute()

    @_guarded_async
    async def fair_renew(self, line: str, requests: list[str], ttl_s: float) -> None:
        if requests:
            until_ms = int((time.time() + ttl_s) * 1000)
            await self._client().zadd(self._k("fair", "alive", line), {r: until_ms for r in requests}, xx=True)

    @_guarded_async
    async def fair_charge(self, line: str, policy: str, *, student: str, amount: float) -> None:
        key = self._k("fair", "ctr", policy, line)
        pipe = self._client().pipeline(transaction=False)
        pipe.hincrbyfloat(key, student, float(amount))
        pipe.pexpire(key, int(FAIR_COUNTER_TTL_S * 1000))
        await pipe.execute()

    @_guarded_async
    async def fair_policy(self) -> str | None:
        value = await self._client().get(self._k(FAIR_POLICY_KEY))
        return value.decode() if value else None

    @_guarded
    def set_fair_policy(self, policy: str | None) -> None:
        """Reaches every gateway process on this Redis (each reads it at most once a second)."""
        if policy is None:
            self._sync.delete(self._k(FAIR_POLICY_KEY))
        else:
            self._sync.set(self._k(FAIR_POLICY_KEY), check_policy(policy))

    @_guarded_async
    async def renew_many(self, leases: list[tuple[str, str]], lease_s: float) -> None:
        """Every lease a process holds, renewed in one pipeline (core/lease.py)."""
        lease_ms = int(lease_s * 1000)
        until_ms = int(time.time() * 1000) + lease_ms
        pipe = self._client().pipeline(transaction=False)
        for resource, lease_id in leases:
            pipe.eval(_RENEW_LUA, 1, self._k("lease", resource), until_ms, lease_id, lease_ms)
        await pipe.execute()

    @_guarded_async
    async def release(self, resource: str, lease_id: str) -> None:
        await self._client().zrem(self._k("lease", resource), lease_id)

    @_guarded_async
    async def busy(self, resources: list[str]) -> dict[str, int]:
        if not resources:
            return {}
        now_ms = int(time.time() * 1000)
        pipe = self._client().pipeline(transaction=False)
        for resource in resources:
            pipe.zcount(self._k("lease", resource), now_ms + 1, "+inf")
        counts = await pipe.execute()
        return dict(zip(resources, (int(c) for c in counts)))

    @_guarded_async
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

    @_guarded_async
    async def mark_suspect(self, worker_id: int, ttl_s: float) -> None:
        until_ms = int((time.time() + ttl_s) * 1000)
        await self._client().zadd(self._k("suspects"), {str(worker_id): until_ms})

    @_guarded
    def suspects_sync(self) -> frozenset[int]:
        now_ms = int(time.time() * 1000)
        self._sync.zremrangebyscore(self._k("suspects"), "-inf", now_ms)
        members: list[bytes] = self._sync.zrangebyscore(self._k("suspects"), now_ms + 1, "+inf")  # type: ignore[assignment]
        return frozenset(int(member) for member in members)

    @_guarded_async
    async def set_affinity(self, conversation: str, worker_id: int, ttl_s: float) -> None:
        await self._client().set(self._k("affinity", conversation), worker_id, px=int(ttl_s * 1000))

    @_guarded_async
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

    @_guarded_async
    async def generation(self, name: str) -> int:
        value = await self._client().get(self._k("gen", name))
        return int(value or 0)

    @_guarded
    def bump_generation(self, name: str) -> int:
        return int(self._sync.incr(self._k("gen", name)))

    @_guarded_async
    async def publish_queue(self, process: str, depths: dict[str, int], ttl_s: float) -> None:
        key = self._k("queue", process)
        pipe = self._client().pipeline(transaction=True)
        pipe.delete(key)
        waiting = {line: depth for line, depth in depths.items() if depth}
        if waiting:
            pipe.hset(key, mapping=waiting)
            pipe.pexpire(key, int(ttl_s * 1000))
        await pipe.execute()

    @_guarded
    def queue_depths_sync(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for key in self._sync.scan_iter(self._k("queue", "*")):
            depths: dict[bytes, bytes] = self._sync.hgetall(key)  # type: ignore[assignment]
            for line, depth in depths.items():
                total[line.decode()] = total.get(line.decode(), 0) + int(depth)
        return total

    @_guarded_async
    async def admit_seen(self, scopes: list[QuotaScope], ask: QuotaAsk,
                         generation_name: str) -> tuple[QuotaVerdict, int]:
        pipe = self._client().pipeline(transaction=False)
        pipe.get(self._k("gen", generation_name))
        pipe.eval(ADMIT_LUA, *self._admit_keys_and_args(scopes, ask))
        generation, result = await pipe.execute()
        return verdict_from_lua(result), int(generation or 0)

    def _admit_keys_and_args(self, scopes: list[QuotaScope], ask: QuotaAsk) -> list[object]:
        keys = [
            key
            for scope in scopes
            for key in (self._k("window", scope.name), self._k("lease", concurrency_resource(scope.name)),
                        self._k("tokens", scope.name, ask.day), self._k("tokens", scope.name, ask.week or "-"),
                        self._k("tokens", scope.name, ask.term or "-"))
        ]
        return [len(keys), *keys, *lua_args(scopes, ask, int(time.time() * 1000))]

    @_guarded_async
    async def admit(self, scopes: list[QuotaScope], ask: QuotaAsk) -> QuotaVerdict:
        result = await self._client().eval(ADMIT_LUA, *self._admit_keys_and_args(scopes, ask))
        return verdict_from_lua(result)

    @_guarded_async
    async def settle(self, scopes: list[str], day: str, delta: int, *, periods: tuple[str, ...] = ()) -> None:
        pipe = self._client().pipeline(transaction=False)
        for scope in scopes:
            for period in (day, *periods):
                pipe.incrby(self._k("tokens", scope, period), delta)
                pipe.pexpire(self._k("tokens", scope, period), counter_ttl_ms(period))
        await pipe.execute()

    @_guarded_async
    async def finish(self, settlement: Settlement) -> None:
        """Every part of a request's end in one pipeline: one round trip."""
        pipe = self._client().pipeline(transaction=False)
        for resource, lease_id in settlement.leases:
            pipe.zrem(self._k("lease", resource), lease_id)
        if settlement.token_delta:
            for scope in settlement.token_scopes:
                for period in settlement.token_periods:
                    pipe.incrby(self._k("tokens", scope, period), settlement.token_delta)
                    pipe.pexpire(self._k("tokens", scope, period), counter_ttl_ms(period))
        if settlement.fair_amount:
            key = self._k("fair", "ctr", settlement.fair_policy, settlement.fair_line)
            pipe.hincrbyfloat(key, settlement.fair_student, float(settlement.fair_amount))
            pipe.pexpire(key, int(FAIR_COUNTER_TTL_S * 1000))
        for scope, request_id in settlement.window_entries:
            pipe.zrem(self._k("window", scope), request_id)
        await pipe.execute()

    @_guarded
    def tokens_used_sync(self, scope: str, day: str) -> int:
        return int(self._sync.get(self._k("tokens", scope, day)) or 0)


_live_state: LiveState | None = None


def set_fair_policy(policy: str | None) -> None:
    """Switch the fair-sharing policy at run time ("tokens", "requests"; None: back to
    OCS_FAIR_POLICY). On Redis every gateway process follows within a second; on the in-process
    default only this process does (a management command in another process cannot reach it)."""
    live_state().set_fair_policy(policy)


def live_state() -> LiveState:
    """The process-wide backend chosen by settings (REDIS_URL or in-process)."""
    global _live_state
    if _live_state is None:
        from django.conf import settings

        _live_state = (
            RedisLiveState(settings.REDIS_URL, settings.OCS_LIVE_NAMESPACE)
            if settings.REDIS_URL
            else InProcessLiveState()
        )
    return _live_state
