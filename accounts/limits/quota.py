"""Request quotas, decided atomically in live state: requests per minute, tokens per day and
concurrent requests, for one or more counting scopes at once ("user:5", and "key:9" when a key
has caps of its own). All scopes are checked, then all are charged, in one step: in Redis one Lua
script, in-process under one lock. So N gateway processes together admit exactly as many
requests as a cap allows, and a token budget cannot be overspent by requests racing each other:
each one reserves its worst case before it is dispatched and gives back the difference after.

- requests per minute: a sliding 60 s window of admitted request ids (exact, not bucketed);
- concurrency: leases in the live-state lease set "conc:<scope>", renewed while the request
  runs and expiring if the gateway process dies (so a crash never leaks a student's slot);
- tokens per day, per week and per term: one counter per scope and period ("2026-12-01",
  "W2026-11-30" for the week starting that Monday, "T2026-09-01" for a term starting then),
  all three reserved up front and settled afterwards. A week or term counter runs whether or not
  a cap is set, so a budget set mid-week counts the week's earlier use.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from core.live import drop_up_to

WINDOW_MS = 60_000
TOKEN_COUNTER_TTL_MS = 2 * 86_400_000
WEEK_COUNTER_TTL_MS = 8 * 86_400_000
TERM_COUNTER_TTL_MS = 400 * 86_400_000
Kind = Literal["requests_per_minute", "tokens_per_day", "concurrency", "tokens_per_week", "tokens_per_term"]
KINDS: tuple[Kind, ...] = ("requests_per_minute", "tokens_per_day", "concurrency", "tokens_per_week",
                           "tokens_per_term")
BUDGET_KINDS: frozenset[Kind] = frozenset({"tokens_per_day", "tokens_per_week", "tokens_per_term"})


def concurrency_resource(scope: str) -> str:
    return f"conc:{scope}"


@dataclass(frozen=True)
class QuotaScope:
    name: str
    requests_per_minute: int | None
    tokens_per_day: int | None
    concurrency: int | None
    tokens_per_week: int | None = None
    tokens_per_term: int | None = None


@dataclass(frozen=True)
class QuotaAsk:
    request_id: str
    reserve_tokens: int
    day: str
    lease_s: float
    week: str = ""  # the week's counter ("W" + its Monday); "": none
    term: str = ""  # the term's counter ("T" + its first day); "": no term

    def periods(self) -> tuple[str, ...]:
        """The token counters this request is charged on: day, then week and term if any."""
        return (self.day, *(period for period in (self.week, self.term) if period))


@dataclass(frozen=True)
class QuotaVerdict:
    """The decision, and the counts of the scope it is about (the refusing one, else the first)."""

    admitted: bool
    scope_index: int
    refused_by: Kind | None
    requests_used: int
    tokens_used: int  # the day's (for a week or term refusal: that period's)
    window_reset_ms: int  # when the oldest request in the window leaves it (0: window empty)


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
        used_week = tokens.get((scope.name, ask.week), 0) if ask.week else 0
        used_term = tokens.get((scope.name, ask.term), 0) if ask.term else 0
        reset_ms = window[next(iter(window))] + WINDOW_MS - now_ms if window else 0  # the oldest
        refused: Kind | None = None
        refused_used = used_tokens
        if scope.requests_per_minute is not None and len(window) >= scope.requests_per_minute:
            refused = "requests_per_minute"
        elif scope.concurrency is not None and len(running) >= scope.concurrency:
            refused = "concurrency"
        elif scope.tokens_per_day is not None and used_tokens + ask.reserve_tokens > scope.tokens_per_day:
            refused = "tokens_per_day"
        elif (ask.week and scope.tokens_per_week is not None
              and used_week + ask.reserve_tokens > scope.tokens_per_week):
            refused, refused_used = "tokens_per_week", used_week
        elif (ask.term and scope.tokens_per_term is not None
              and used_term + ask.reserve_tokens > scope.tokens_per_term):
            refused, refused_used = "tokens_per_term", used_term
        if refused is not None:
            return QuotaVerdict(False, index, refused, len(window), refused_used, reset_ms)
        seen.append((len(window), used_tokens, reset_ms))
    for scope in scopes:
        windows[scope.name][ask.request_id] = now_ms
        leases[concurrency_resource(scope.name)][ask.request_id] = now_ms / 1000 + ask.lease_s
        for period in ask.periods():
            tokens[(scope.name, period)] = tokens.get((scope.name, period), 0) + ask.reserve_tokens
    used_requests, used_tokens, reset_ms = seen[0]
    return QuotaVerdict(True, 0, None, used_requests + 1, used_tokens + ask.reserve_tokens, reset_ms or WINDOW_MS)


# KEYS: five per scope (window zset, lease zset, day, week and term token counters).
# ARGV: now_ms, request_id, reserve, lease_until_ms, counter_ttl_ms, week_ttl_ms, term_ttl_ms,
# counts_week (0/1), counts_term (0/1), then per scope requests_per_minute, tokens_per_day,
# concurrency, tokens_per_week, tokens_per_term (-1 = no cap).
# Returns {admitted, scope_index, refused_kind (0 none, 1 rpm, 2 tokens, 3 concurrency, 4 week,
#          5 term), requests_used, tokens_used, window_reset_ms}.
ADMIT_LUA = """
local now = tonumber(ARGV[1])
local id = ARGV[2]
local reserve = tonumber(ARGV[3])
local lease_until = tonumber(ARGV[4])
local counter_ttl = tonumber(ARGV[5])
local week_ttl = tonumber(ARGV[6])
local term_ttl = tonumber(ARGV[7])
local counts_week = tonumber(ARGV[8]) == 1
local counts_term = tonumber(ARGV[9]) == 1
local scopes = #KEYS / 5
local first = nil
for i = 0, scopes - 1 do
  local window, running, counter = KEYS[i * 5 + 1], KEYS[i * 5 + 2], KEYS[i * 5 + 3]
  local week, term = KEYS[i * 5 + 4], KEYS[i * 5 + 5]
  local base = 10 + i * 5
  local rpm, tpd, conc = tonumber(ARGV[base]), tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  local tpw, tpt = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
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
  if counts_week and tpw >= 0 then
    local used_w = tonumber(redis.call('GET', week) or '0')
    if used_w + reserve > tpw then return {0, i, 4, used_r, used_w, reset} end
  end
  if counts_term and tpt >= 0 then
    local used_s = tonumber(redis.call('GET', term) or '0')
    if used_s + reserve > tpt then return {0, i, 5, used_r, used_s, reset} end
  end
  if first == nil then first = {used_r, used_t, reset} end
end
for i = 0, scopes - 1 do
  local window, running, counter = KEYS[i * 5 + 1], KEYS[i * 5 + 2], KEYS[i * 5 + 3]
  redis.call('ZADD', window, now, id)
  redis.call('PEXPIRE', window, 61000)
  redis.call('ZADD', running, lease_until, id)
  redis.call('PEXPIRE', running, lease_until - now + 60000)
  redis.call('INCRBY', counter, reserve)
  redis.call('PEXPIRE', counter, counter_ttl)
  if counts_week then
    redis.call('INCRBY', KEYS[i * 5 + 4], reserve)
    redis.call('PEXPIRE', KEYS[i * 5 + 4], week_ttl)
  end
  if counts_term then
    redis.call('INCRBY', KEYS[i * 5 + 5], reserve)
    redis.call('PEXPIRE', KEYS[i * 5 + 5], term_ttl)
  end
end
local reset = first[3]
if reset == 0 then reset = 60000 end
return {1, 0, 0, first[1] + 1, first[2] + reserve, reset}
"""
LUA_KINDS: dict[int, Kind | None] = {0: None, 1: "requests_per_minute", 2: "tokens_per_day", 3: "concurrency",
                                     4: "tokens_per_week", 5: "tokens_per_term"}


def counter_ttl_ms(period: str) -> int:
    """How long a token counter outlives its period: a day's two days, a week's eight days."""
    return WEEK_COUNTER_TTL_MS if period.startswith("W") else (
        TERM_COUNTER_TTL_MS if period.startswith("T") else TOKEN_COUNTER_TTL_MS)


def lua_args(scopes: list[QuotaScope], ask: QuotaAsk, now_ms: int) -> list[int | str]:
    args: list[int | str] = [now_ms, ask.request_id, ask.reserve_tokens, now_ms + int(ask.lease_s * 1000),
                             TOKEN_COUNTER_TTL_MS, WEEK_COUNTER_TTL_MS, TERM_COUNTER_TTL_MS, int(bool(ask.week)),
                             int(bool(ask.term))]
    for scope in scopes:
        for cap in (scope.requests_per_minute, scope.tokens_per_day, scope.concurrency, scope.tokens_per_week,
                    scope.tokens_per_term):
            args.append(-1 if cap is None else cap)
    return args


def verdict_from_lua(result: list[int]) -> QuotaVerdict:
    admitted, index, kind, used_r, used_t, reset = (int(value) for value in result)
    return QuotaVerdict(admitted == 1, index, LUA_KINDS[kind], used_r, used_t, reset)
