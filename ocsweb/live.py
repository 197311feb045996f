"""Live state shared by gateway processes: worker slot leases and cache generations.

Two backends with one contract:
- InProcessLiveState: the embedded default (one gateway process), plain dicts;
- RedisLiveState: several gateway processes on one Redis. Claiming a slot is one Lua script,
  so two processes can never both take a worker's last slot.

A slot is a lease with an expiry, not a counter: if the gateway process that holds it dies,
the lease runs out and the slot comes back. Long streams renew their lease.
"""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Protocol


class LiveState(Protocol):
    async def claim_slot(self, worker_id: int, capacity: int, lease_s: float) -> str | None: ...
    async def renew_slot(self, worker_id: int, lease_id: str, lease_s: float) -> None: ...
    async def release_slot(self, worker_id: int, lease_id: str) -> None: ...
    async def busy_slots(self, worker_ids: list[int]) -> dict[int, int]: ...
    async def generation(self, name: str) -> int: ...
    def bump_generation(self, name: str) -> int: ...


class InProcessLiveState:
    def __init__(self, clock: "callable[[], float]" = time.monotonic) -> None:  # type: ignore[valid-type]
        self._clock = clock
        self._leases: dict[int, dict[str, float]] = {}
        self._generations: dict[str, int] = {}
        self._lock = threading.Lock()

    def _live_leases(self, worker_id: int) -> dict[str, float]:
        now = self._clock()
        leases = self._leases.setdefault(worker_id, {})
        for lease_id in [lid for lid, expires in leases.items() if expires <= now]:
            del leases[lease_id]
        return leases

    async def claim_slot(self, worker_id: int, capacity: int, lease_s: float) -> str | None:
        with self._lock:
            leases = self._live_leases(worker_id)
            if len(leases) >= capacity:
                return None
            lease_id = uuid.uuid4().hex
            leases[lease_id] = self._clock() + lease_s
            return lease_id

    async def renew_slot(self, worker_id: int, lease_id: str, lease_s: float) -> None:
        with self._lock:
            leases = self._leases.get(worker_id, {})
            if lease_id in leases:
                leases[lease_id] = self._clock() + lease_s

    async def release_slot(self, worker_id: int, lease_id: str) -> None:
        with self._lock:
            self._leases.get(worker_id, {}).pop(lease_id, None)

    async def busy_slots(self, worker_ids: list[int]) -> dict[int, int]:
        with self._lock:
            return {worker_id: len(self._live_leases(worker_id)) for worker_id in worker_ids}

    async def generation(self, name: str) -> int:
        return self._generations.get(name, 0)

    def bump_generation(self, name: str) -> int:
        with self._lock:
            self._generations[name] = self._generations.get(name, 0) + 1
            return self._generations[name]


# KEYS[1] = the worker's lease zset; ARGV = capacity, now_ms, expires_ms, lease_id.
_CLAIM_LUA = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(ARGV[3]) - tonumber(ARGV[2])) + 60000)
return 1
"""
# KEYS[1] = lease zset; ARGV = expires_ms, lease_id. Renews only a lease that still exists.
_RENEW_LUA = """
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 60000)
end
return 1
"""


class RedisLiveState:
    """Leases live in one sorted set per worker (member = lease id, score = expiry in ms).

    Time comes from the Redis server (TIME inside the script would forbid writes on old Redis,
    so each process passes its own wall clock; gateway hosts are NTP-synced and leases are
    tens of seconds, so skew of a few ms does not matter)."""

    def __init__(self, url: str, namespace: str = "ocs") -> None:
        import redis
        import redis.asyncio as aioredis

        self._url = url
        self._ns = namespace
        self._sync = redis.Redis.from_url(url)
        self._aioredis = aioredis
        self._clients: dict[int, object] = {}

    def _client(self):  # noqa: ANN202 - redis.asyncio.Redis, bound to the running loop
        loop_id = id(asyncio.get_running_loop())
        client = self._clients.get(loop_id)
        if client is None:
            client = self._aioredis.Redis.from_url(self._url)
            self._clients[loop_id] = client
        return client

    def _slots_key(self, worker_id: int) -> str:
        return f"{self._ns}:slots:{worker_id}"

    async def claim_slot(self, worker_id: int, capacity: int, lease_s: float) -> str | None:
        now_ms = int(time.time() * 1000)
        lease_id = uuid.uuid4().hex
        claimed = await self._client().eval(
            _CLAIM_LUA, 1, self._slots_key(worker_id), capacity, now_ms, now_ms + int(lease_s * 1000), lease_id
        )
        return lease_id if claimed == 1 else None

    async def renew_slot(self, worker_id: int, lease_id: str, lease_s: float) -> None:
        expires_ms = int(time.time() * 1000) + int(lease_s * 1000)
        await self._client().eval(_RENEW_LUA, 1, self._slots_key(worker_id), expires_ms, lease_id, int(lease_s * 1000))

    async def release_slot(self, worker_id: int, lease_id: str) -> None:
        await self._client().zrem(self._slots_key(worker_id), lease_id)

    async def busy_slots(self, worker_ids: list[int]) -> dict[int, int]:
        if not worker_ids:
            return {}
        now_ms = int(time.time() * 1000)
        pipe = self._client().pipeline(transaction=False)
        for worker_id in worker_ids:
            pipe.zcount(self._slots_key(worker_id), now_ms + 1, "+inf")
        counts = await pipe.execute()
        return dict(zip(worker_ids, (int(c) for c in counts)))

    async def generation(self, name: str) -> int:
        value = await self._client().get(f"{self._ns}:gen:{name}")
        return int(value or 0)

    def bump_generation(self, name: str) -> int:
        return int(self._sync.incr(f"{self._ns}:gen:{name}"))


_live_state: LiveState | None = None


def live_state() -> LiveState:
    """The process-wide backend chosen by settings (REDIS_URL or in-process)."""
    global _live_state
    if _live_state is None:
        from django.conf import settings

        namespace = getattr(settings, "OCS_LIVE_NAMESPACE", "ocs")
        _live_state = RedisLiveState(settings.REDIS_URL, namespace) if settings.REDIS_URL else InProcessLiveState()
    return _live_state
