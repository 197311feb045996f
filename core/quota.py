"""Request quotas, decided atomically in live state: requests per minute, tokens per day and
concurrent requests, for one or more counting scopes at once ("user:5", and "key:9" when a key
has caps of its own). All scopes are checked, then all are charged, in one step: in Redis one Lua
script, in-process under one lock. So N gateway processes together admit exactly as many
requests as a cap allows, and a token budget cannot be overspent by requests racing each other:
each one reserves its worst case before it is dispatched and gives back the difference after.

- requests per minute: a sliding 60 s window of admitted request ids (exact, not bucketed);
- concurrency: leases in the live-state lease set "conc:<scope>", renewed while the request
  runs and expiring if the gateway process dies (so a crash never leaks a student's slot);
- tokens per day: one counter per scope and day, reserved up front, settled afterwards.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

WINDOW_MS = 60_000
TOKEN_COUNTER_TTL_MS = 2 * 86_400_000
Kind = Literal["requests_per_minute", "tokens_per_day", "concurrency"]
KINDS: tuple[Kind, ...] = ("requests_per_minute", "tokens_per_day", "concurrency")


def concurrency_resource(scope: str) -> str:
    return f"conc:{scope}"


@dataclass(frozen=True)
class QuotaScope:
    name: str
    requests_per_minute: int | None
    tokens_per_day: int | None
    concurrency: int | None


@dataclass(frozen=True)
class QuotaAsk:
    request_id: str
    reserve_tokens: int
    day: str
    lease_s: float


@dataclass(frozen=True)
class QuotaVerdict:
    """The decision, and the counts of the scope it is about (the refusing one, else the first)."""

    admitted: bool
    scope_index: int
    refused_by: Kind | None
    requests_used: int
    tokens_used: int
    window_reset_ms: int  # when the oldest request in the window leaves it (0: window empty)


def drop_up_to(entries: dict[str, float] | dict[str, int], cutoff: float) -> None:
    """Remove the entries (id -> time) at or before `cutoff`: expired leases, requests that left
    the window. The in-process twin of ZREMRANGEBYSCORE."""
    for entry_id in [eid for eid, at in entries.items() if at <= cutoff]:
        del entries[entry_id]


def drop_oldest_up_to(window: OrderedDict[str, int], cutoff: float) -> None:
    """drop_up_to for a request window, whose entries are added in time order: pops from the
    old end and stops at the first entry still inside, so the cost is what leaves the window,
    not the window's size (a generous requests-per-minute cap holds thousands of entries)."""
    while window:
        oldest = next(iter(window))
        if window[oldest] > cutoff:
            return
        window.popitem(last=False)


def decide_in_memory(
    *,
    scopes: list[QuotaScope],
    ask: QuotaAsk,
    now_ms: int,
    windows: dict[str, OrderedDict[str, int]],
    leases: dict[str, dict[str, float]],
    tokens: dict[tuple[str, str], int],
) -> QuotaVerdict:
    """The in-process twin of ADMIT_LUA, over plain dicts (the caller holds the lock). Lease
    expiries are in seconds, like the rest of the in-process lease table."""
    seen: list[tuple[int, int, int]] = []
    for index, scope in enumerate(scopes):
        window = windows.setdefault(scope.name, OrderedDict())
        drop_oldest_up_to(window, now_ms - WINDOW_MS)
        running = leases.setdefault(concurrency_resource(scope.name), {})
        drop_up_to(running, now_ms / 1000)
        used_tokens = tokens.get((scope.name, ask.day), 0)
        reset_ms = window[next(iter(window))] + WINDOW_MS - now_ms if window else 0  # the oldest
        refused: Kind | None = None
        if scope.requests_per_minute is not None and len(window) >= scope.requests_per_minute:
            refused = "requests_per_minute"
        elif scope.concurrency is not None and len(running) >= scope.concurrency:
            refused = "concurrency"
        elif scope.tokens_per_day is not None and used_tokens + ask.reserve_tokens > scope.tokens_per_day:
            refused = "tokens_per_day"
        if refused is not None:
            return QuotaVerdict(False, index, refused, len(window), used_tokens, reset_ms)
        seen.append((len(window), used_tokens, reset_ms))
    for scope in scopes:
        windows[scope.name][ask.request_id] = now_ms
        leases[concurrency_resource(scope.name)][ask.request_id] = now_ms / 1000 + ask.lease_s
        tokens[(scope.name, ask.day)] = tokens.get((scope.name, ask.day), 0) + ask.reserve_tokens
    used_requests, used_tokens, reset_ms = seen[0]
    return QuotaVerdict(True, 0, None, used_requests + 1, used_tokens + ask.reserve_tokens, reset_ms or WINDOW_MS)


# KEYS: three per scope (window zset, lease zset, token counter).
# ARGV: now_ms, request_id, reserve, lease_until_ms, counter_ttl_ms, then per scope
# requests_per_minute, tokens_per_day, concurrency (-1 = no cap).
# Returns {admitted, scope_index, refused_kind (0 none, 1 rpm, 2 tokens, 3 concurrency),
#          requests_used, tokens_used, window_reset_ms}.
ADMIT_LUA = """
local now = tonumber(ARGV[1])
local id = ARGV[2]
local reserve = tonumber(ARGV[3])
local lease_until = tonumber(ARGV[4])
local counter_ttl = tonumber(ARGV[5])
local scopes = #KEYS / 3
local first = nil
for i = 0, scopes - 1 do
  local window, running, counter = KEYS[i * 3 + 1], KEYS[i * 3 + 2], KEYS[i * 3 + 3]
  local rpm, tpd, conc = tonumber(ARGV[6 + i * 3]), tonumber(ARGV[7 + i * 3]), tonumber(ARGV[8 + i * 3])
  redis.call('ZREMRANGEBYSCORE', window, '-inf', now - 60000)
  redis.call('ZREMRANGEBYSCORE', running, '-inf', now)
  local used_r = redis.call('ZCARD', window)
  local used_c = redis.call('ZCARD', running)
  local used_t = tonumber(redis.call('GET', counter) or '0')
  local reset = 0
  local oldest = redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')
  if oldest[2] then reset = tonumber(oldest[2]) + 60000 - now end
  if rpm >= 0 and used_r >= rpm then return {0, i, 1, used_r, used_t, reset} end
  if conc >= 0 and used_c >= conc then return {0, i, 3, used_r, used_t, reset} end
  if tpd >= 0 and used_t + reserve > tpd then return {0, i, 2, used_r, used_t, reset} end
  if first == nil then first = {used_r, used_t, reset} end
end
for i = 0, scopes - 1 do
  local window, running, counter = KEYS[i * 3 + 1], KEYS[i * 3 + 2], KEYS[i * 3 + 3]
  redis.call('ZADD', window, now, id)
  redis.call('PEXPIRE', window, 61000)
  redis.call('ZADD', running, lease_until, id)
  redis.call('PEXPIRE', running, lease_until - now + 60000)
  redis.call('INCRBY', counter, reserve)
  redis.call('PEXPIRE', counter, counter_ttl)
end
local reset = first[3]
if reset == 0 then reset = 60000 end
return {1, 0, 0, first[1] + 1, first[2] + reserve, reset}
"""
LUA_KINDS: dict[int, Kind | None] = {0: None, 1: "requests_per_minute", 2: "tokens_per_day", 3: "concurrency"}


def lua_args(scopes: list[QuotaScope], ask: QuotaAsk, now_ms: int) -> list[int | str]:
    args: list[int | str] = [now_ms, ask.request_id, ask.reserve_tokens, now_ms + int(ask.lease_s * 1000),
                             TOKEN_COUNTER_TTL_MS]
    for scope in scopes:
        for cap in (scope.requests_per_minute, scope.tokens_per_day, scope.concurrency):
            args.append(-1 if cap is None else cap)
    return args


def verdict_from_lua(result: list[int]) -> QuotaVerdict:
    admitted, index, kind, used_r, used_t, reset = (int(value) for value in result)
    return QuotaVerdict(admitted == 1, index, LUA_KINDS[kind], used_r, used_t, reset)
