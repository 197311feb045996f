"""Live state shared by gateway processes, the mechanism only: the connection, leases, suspect
workers, cache generations, queue depths and one batch of operations for a request's end.

Two backends with one contract:
- InProcessLiveState: the embedded default (one gateway process), plain dicts;
- RedisLiveState: several gateway processes on one Redis. Claiming a lease is one Lua script,
  so two processes can never both take a worker's last slot.

A lease has an expiry, it is not a counter: if the gateway process that holds it dies, the
lease runs out and the capacity comes back. Running requests renew their leases. The same
mechanism bounds a worker's slots (resource "worker:<id>") and a student's or key's concurrent
requests (resource "conc:user:<id>", "conc:key:<id>").

The rules that use it live with their apps and plug in from above, as subclasses of each back
end: the worker slot's (the fair line, slot owners, affinity, prefix senders) in
inference/admission/live.py, the quota's in accounts/limits/live_quota.py. The roof composes them
(ocsweb/live.py, named by settings.OCS_LIVE_STATE) and `live_state()` builds that composition;
this module imports no app. A rule's share of a request's end is a SettlementPart that its back
end queues on the end's one batch (`_settle`), so the end stays one round trip.
"""
from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar
from urllib.parse import urlsplit

from prometheus_client import Counter, Histogram
from redis.exceptions import RedisError


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
# Where the caller's last round trip's time went, set by the lean client (core/lean_redis.py), in
# seconds: (`reply`: from the write until the reply's last byte was handed to this process: the
# network, Redis, and the wait for a core to run either and for this event loop to read the
# socket; `resume`: from there until the waiting coroutine ran again, the event loop coming round
# to it past everything else ready to run).
LAST_TRIP: ContextVar[tuple[float, float]] = ContextVar("ocs_live_last_trip")
NO_TRIP = (0.0, 0.0)
# And how long each took as its caller saw it (part "all": from the call to the caller running
# again), and with the lean client (LAST_TRIP above) in which part: "reply" (waiting
# for Redis's answer to reach the process) and "resume" (waiting for the event loop to run the
# caller again). docs/performance.md, "First come, first served".
ROUND_TRIP_SECONDS = Histogram("ocs_live_state_round_trip_seconds",
                               "A live-state round trip's time, by operation and part (all, reply, resume)",
                               ["op", "part"], buckets=(0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                        0.1, 0.25, 1.0))


def round_trip(method: Callable[_P, Awaitable[_T]]) -> Callable[_P, Coroutine[Any, Any, _T]]:
    counted = ROUND_TRIPS.labels(method.__name__)
    timers: list[Any] = []  # (all, reply, resume), made at the first trip: /metrics lists only operations used

    @functools.wraps(method)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        counted.inc()
        started = time.perf_counter()
        LAST_TRIP.set(NO_TRIP)
        try:
            result = await method(*args, **kwargs)
        except (RedisError, OSError) as exc:
            raise LiveStateUnavailable(_describe(args[0]._url, exc)) from exc  # type: ignore[attr-defined]
        if not timers:
            timers.extend(ROUND_TRIP_SECONDS.labels(method.__name__, part) for part in ("all", "reply", "resume"))
        timers[0].observe(time.perf_counter() - started)
        trip = LAST_TRIP.get()
        if trip is not NO_TRIP:
            timers[1].observe(trip[0])
            timers[2].observe(trip[1])
        return result
    return wrapper


def guarded(method: Callable[_P, _T]) -> Callable[_P, _T]:
    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(*args, **kwargs)
        except (RedisError, OSError) as exc:
            raise LiveStateUnavailable(_describe(args[0]._url, exc)) from exc  # type: ignore[attr-defined]
    return wrapper


def worker_resource(worker_id: int) -> str:
    return f"worker:{worker_id}"


def drop_up_to(entries: dict[str, float] | dict[str, int], cutoff: float) -> None:
    """Remove the entries (id -> time) at or before `cutoff`: expired leases, requests that left
    the window. The in-process twin of ZREMRANGEBYSCORE."""
    for entry_id in [eid for eid, at in entries.items() if at <= cutoff]:
        del entries[entry_id]


class SettlementPart(Protocol):
    """One rule's share of a request's end (its token correction, its fair-share charge): the
    back end that carries the rule queues it on the end's batch (`_settle`)."""

    @property
    def empty(self) -> bool: ...


@dataclass(frozen=True)
class Settlement:
    """What a request hands back when it ends, in one round trip: the leases it still holds
    (its concurrency, its slot if not freed yet) and each rule's part (the correction of its
    token reservation, accounts/limits/live_quota.py; its fair-share charge's correction,
    inference/admission/live.py)."""

    leases: tuple[tuple[str, str], ...] = ()  # (resource, lease id)
    parts: tuple[SettlementPart, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.leases and all(part.empty for part in self.parts)

    def __add__(self, other: Settlement) -> Settlement:
        return Settlement(leases=(*self.leases, *other.leases), parts=(*self.parts, *other.parts))


class LiveState(Protocol):
    async def claim(self, resource: str, capacity: int, lease_s: float) -> str | None: ...
    async def renew_many(self, leases: list[tuple[str, str]], lease_s: float) -> None: ...
    async def release(self, resource: str, lease_id: str) -> None: ...
    async def busy(self, resources: list[str]) -> dict[str, int]: ...
    async def mark_suspect(self, worker_id: int, ttl_s: float) -> None: ...
    async def generation(self, name: str) -> int: ...
    def bump_generation(self, name: str) -> int: ...
    def suspects_sync(self) -> frozenset[int]: ...
    async def publish_queue(self, process: str, depths: dict[str, int], ttl_s: float) -> None: ...
    def queue_depths_sync(self) -> dict[str, int]: ...
    async def finish(self, settlement: Settlement) -> None: ...
    async def check(self) -> None: ...


class InProcessLiveState:
    """The mechanism in plain dicts under one lock; a rule's subclass adds its own dicts."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._leases: dict[str, dict[str, float]] = {}
        self._suspects: dict[int, float] = {}
        self._generations: dict[str, int] = {}
        self._queues: dict[str, tuple[dict[str, int], float]] = {}
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

    async def mark_suspect(self, worker_id: int, ttl_s: float) -> None:
        with self._lock:
            self._suspects[worker_id] = self._clock() + ttl_s

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

    async def finish(self, settlement: Settlement) -> None:
        for resource, lease_id in settlement.leases:
            await self.release(resource, lease_id)
        for part in settlement.parts:
            if not part.empty:
                self._settle(part)

    def _settle(self, part: SettlementPart) -> None:
        """Applies one rule's part of a request's end: each rule's subclass settles its own."""
        raise TypeError(f"{type(self).__name__} has no rule that settles {type(part).__name__}")

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

    def __init__(self, url: str, namespace: str = "ocs", client: str = "lean") -> None:
        import redis
        import redis.asyncio as aioredis

        if client not in ("lean", "redis-py"):
            raise ValueError(f"client must be 'lean' or 'redis-py', not {client!r}")
        self._url = url
        self._ns = namespace
        # Timeouts: a Redis that hangs must fail a request within seconds, not hold it (and its
        # slot) for as long as the kernel keeps a dead connection open.
        self._timeouts = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
                          "socket_timeout": REDIS_SOCKET_TIMEOUT_S}
        self._sync = redis.Redis.from_url(url, **self._timeouts)
        self._aioredis = aioredis
        self._clients: dict[int, object] = {}  # redis.asyncio's, one per event loop
        # core/lean_redis.py's, one for every loop: it connects again on a new one and drops the old
        # connection. Imported here, not at the top: it needs hiredis, which redis-py can do without.
        self._lean_client: Any = None
        if client == "lean":
            from core.lean_redis import LeanRedis

            self._lean_client = LeanRedis(url, connect_timeout_s=REDIS_CONNECT_TIMEOUT_S,
                                          socket_timeout_s=REDIS_SOCKET_TIMEOUT_S)

    def _client(self):  # noqa: ANN202 - LeanRedis, or redis.asyncio.Redis bound to the running loop
        if self._lean_client is not None:
            return self._lean_client
        loop_id = id(asyncio.get_running_loop())
        client = self._clients.get(loop_id)
        if client is None:
            pool = self._aioredis.BlockingConnectionPool.from_url(
                self._url, max_connections=REDIS_MAX_CONNECTIONS, timeout=REDIS_SOCKET_TIMEOUT_S, **self._timeouts)
            client = self._aioredis.Redis(connection_pool=pool)
            self._clients[loop_id] = client
        return client

    @round_trip
    async def check(self) -> None:
        """Raises LiveStateUnavailable unless Redis answers a PING."""
        await self._client().ping()

    def _k(self, *parts: str) -> str:
        return ":".join((self._ns, *parts))

    @round_trip
    async def claim(self, resource: str, capacity: int, lease_s: float) -> str | None:
        now_ms = int(time.time() * 1000)
        lease_id = uuid.uuid4().hex
        claimed = await self._client().eval(
            _CLAIM_LUA, 1, self._k("lease", resource), capacity, now_ms, now_ms + int(lease_s * 1000), lease_id
        )
        return lease_id if claimed == 1 else None

    @round_trip
    async def renew_many(self, leases: list[tuple[str, str]], lease_s: float) -> None:
        """Every lease a process holds, renewed in one pipeline (core/lease.py)."""
        lease_ms = int(lease_s * 1000)
        until_ms = int(time.time() * 1000) + lease_ms
        pipe = self._client().pipeline(transaction=False)
        for resource, lease_id in leases:
            pipe.eval(_RENEW_LUA, 1, self._k("lease", resource), until_ms, lease_id, lease_ms)
        await pipe.execute()

    @round_trip
    async def release(self, resource: str, lease_id: str) -> None:
        await self._client().zrem(self._k("lease", resource), lease_id)

    @round_trip
    async def busy(self, resources: list[str]) -> dict[str, int]:
        if not resources:
            return {}
        now_ms = int(time.time() * 1000)
        pipe = self._client().pipeline(transaction=False)
        for resource in resources:
            pipe.zcount(self._k("lease", resource), now_ms + 1, "+inf")
        counts = await pipe.execute()
        return dict(zip(resources, (int(c) for c in counts)))

    @round_trip
    async def mark_suspect(self, worker_id: int, ttl_s: float) -> None:
        until_ms = int((time.time() + ttl_s) * 1000)
        await self._client().zadd(self._k("suspects"), {str(worker_id): until_ms})

    @guarded
    def suspects_sync(self) -> frozenset[int]:
        now_ms = int(time.time() * 1000)
        self._sync.zremrangebyscore(self._k("suspects"), "-inf", now_ms)
        members: list[bytes] = self._sync.zrangebyscore(self._k("suspects"), now_ms + 1, "+inf")  # type: ignore[assignment]
        return frozenset(int(member) for member in members)

    @round_trip
    async def generation(self, name: str) -> int:
        value = await self._client().get(self._k("gen", name))
        return int(value or 0)

    @guarded
    def bump_generation(self, name: str) -> int:
        return int(self._sync.incr(self._k("gen", name)))

    @round_trip
    async def publish_queue(self, process: str, depths: dict[str, int], ttl_s: float) -> None:
        key = self._k("queue", process)
        pipe = self._client().pipeline(transaction=True)
        pipe.delete(key)
        waiting = {line: depth for line, depth in depths.items() if depth}
        if waiting:
            pipe.hset(key, mapping=waiting)
            pipe.pexpire(key, int(ttl_s * 1000))
        await pipe.execute()

    @guarded
    def queue_depths_sync(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for key in self._sync.scan_iter(self._k("queue", "*")):
            depths: dict[bytes, bytes] = self._sync.hgetall(key)  # type: ignore[assignment]
            for line, depth in depths.items():
                total[line.decode()] = total.get(line.decode(), 0) + int(depth)
        return total

    @round_trip
    async def finish(self, settlement: Settlement) -> None:
        """Every part of a request's end in one pipeline: one round trip."""
        pipe = self._client().pipeline(transaction=False)
        for resource, lease_id in settlement.leases:
            pipe.zrem(self._k("lease", resource), lease_id)
        for part in settlement.parts:
            if not part.empty:
                self._settle(pipe, part)
        await pipe.execute()

    def _settle(self, pipe: Any, part: SettlementPart) -> None:  # noqa: ANN401 - a redis.asyncio pipeline
        """Queues one rule's part of a request's end on its pipeline: each rule's subclass
        settles its own."""
        raise TypeError(f"{type(self).__name__} has no rule that settles {type(part).__name__}")


_live_state: LiveState | None = None


def live_state() -> LiveState:
    """The process-wide backend: for REDIS_URL (or in process, without it) the class that
    settings.OCS_LIVE_STATE names, which the roof composes of this mechanism and the apps' rules
    (ocsweb/live.py). Named by a setting, as Django names a cache backend: core imports no app."""
    global _live_state
    if _live_state is None:
        from django.conf import settings
        from django.utils.module_loading import import_string

        if settings.REDIS_URL:
            backend = import_string(settings.OCS_LIVE_STATE["redis"])
            _live_state = backend(settings.REDIS_URL, settings.OCS_LIVE_NAMESPACE, settings.OCS_LIVE_REDIS_CLIENT)
        else:
            _live_state = import_string(settings.OCS_LIVE_STATE["in_process"])()
    assert _live_state is not None
    return _live_state
