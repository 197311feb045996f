"""The quota's rule in the live state, on both back ends: the atomic admission step
(quota.py's decision, in Redis one Lua script), the token counters it reserves on and their
settling. Subclasses of core/live.py's mechanism: the roof composes them with the worker slot's
rules (ocsweb/live.py), and `quota_live()` hands them to the gate (gate.py).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from accounts.limits.quota import (
    ADMIT_LUA,
    QuotaAsk,
    QuotaScope,
    QuotaVerdict,
    concurrency_resource,
    counter_ttl_ms,
    decide_in_memory,
    lua_args,
    verdict_from_lua,
)
from core.live import InProcessLiveState, LiveState, RedisLiveState, SettlementPart, guarded, live_state, round_trip


@dataclass(frozen=True)
class TokenSettlement:
    """A request's part of its end: the correction of its token reservation on every counter it
    was charged on (`Ticket.settlement`), and (only when an admission is undone to be done
    again, gate.py) its entries to take out of the requests-per-minute windows, so it counts once."""

    scopes: tuple[str, ...] = ()
    periods: tuple[str, ...] = ()  # the day first, then the week's and the term's
    delta: int = 0
    window_entries: tuple[tuple[str, str], ...] = ()  # (scope, request id)

    @property
    def empty(self) -> bool:
        return not self.delta and not self.window_entries


class QuotaLiveState(LiveState, Protocol):
    async def admit(self, scopes: list[QuotaScope], ask: QuotaAsk) -> QuotaVerdict: ...
    # The same, and the generation `generation_name` holds, read just before it in the same round trip.
    async def admit_seen(self, scopes: list[QuotaScope], ask: QuotaAsk,
                         generation_name: str) -> tuple[QuotaVerdict, int]: ...
    async def settle(self, scopes: list[str], day: str, delta: int, *, periods: tuple[str, ...] = ()) -> None: ...
    def tokens_used_sync(self, scope: str, day: str) -> int: ...


class InProcessQuota(InProcessLiveState):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._windows: dict[str, OrderedDict[str, int]] = {}
        self._tokens: dict[tuple[str, str], int] = {}

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
            self._add_tokens(scopes, day, delta, periods)

    def _add_tokens(self, scopes: list[str], day: str, delta: int, periods: tuple[str, ...]) -> None:
        if len(self._tokens) > 100_000:  # bound memory: keep the current counters only
            current = {day, *periods}
            self._tokens = {k: v for k, v in self._tokens.items() if k[1] in current}
        for scope in scopes:
            for period in (day, *periods):
                self._tokens[(scope, period)] = self._tokens.get((scope, period), 0) + delta

    def tokens_used_sync(self, scope: str, day: str) -> int:
        return self._tokens.get((scope, day), 0)

    def _settle(self, part: SettlementPart) -> None:
        if not isinstance(part, TokenSettlement):
            return super()._settle(part)
        with self._lock:
            if part.delta and part.periods:
                self._add_tokens(list(part.scopes), part.periods[0], part.delta, part.periods[1:])
            for scope, request_id in part.window_entries:
                self._windows.get(scope, OrderedDict()).pop(request_id, None)
        return None


class RedisQuota(RedisLiveState):
    @round_trip
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

    @round_trip
    async def admit(self, scopes: list[QuotaScope], ask: QuotaAsk) -> QuotaVerdict:
        result = await self._client().eval(ADMIT_LUA, *self._admit_keys_and_args(scopes, ask))
        return verdict_from_lua(result)

    @round_trip
    async def settle(self, scopes: list[str], day: str, delta: int, *, periods: tuple[str, ...] = ()) -> None:
        pipe = self._client().pipeline(transaction=False)
        for scope in scopes:
            for period in (day, *periods):
                pipe.incrby(self._k("tokens", scope, period), delta)
                pipe.pexpire(self._k("tokens", scope, period), counter_ttl_ms(period))
        await pipe.execute()

    @guarded
    def tokens_used_sync(self, scope: str, day: str) -> int:
        return int(self._sync.get(self._k("tokens", scope, day)) or 0)

    def _settle(self, pipe: Any, part: SettlementPart) -> None:  # noqa: ANN401 - a redis.asyncio pipeline
        if not isinstance(part, TokenSettlement):
            return super()._settle(pipe, part)
        if part.delta:
            for scope in part.scopes:
                for period in part.periods:
                    pipe.incrby(self._k("tokens", scope, period), part.delta)
                    pipe.pexpire(self._k("tokens", scope, period), counter_ttl_ms(period))
        for scope, request_id in part.window_entries:
            pipe.zrem(self._k("window", scope), request_id)
        return None


def quota_live() -> QuotaLiveState:
    """The process's live state (core.live.live_state), with the quota's rule in it."""
    state = live_state()
    if not isinstance(state, (InProcessQuota, RedisQuota)):
        raise TypeError(f"{type(state).__name__} has no quota rule: see settings.OCS_LIVE_STATE")
    return state
