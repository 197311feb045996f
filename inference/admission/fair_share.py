"""Who is served next when every slot is busy. Pure: no Django, no I/O, no clock of its own.

Three policies (POLICIES), one shape: every student has a service counter, the next request served
is a waiting request of the waiting student with the least counter (between equal counters the
cheaper request, then the oldest), and a student who
starts waiting is first lifted to the least counter among those already waiting (never lowered),
so time spent away is not banked as credit to spend on a burst later.

- "tokens" (the default): the virtual token counter of Sheng et al., "Fairness in Serving Large
  Language Models" (OSDI '24). A request adds what it cost the worker: prompt tokens the worker
  computed (not those it found in the slot's cache) x PROMPT_TOKEN_COST plus output tokens x
  OUTPUT_TOKEN_COST, divided by the student's class weight (a weight of 2 receives twice the
  service of a weight of 1 while both wait). A 20,000-token agent turn counts 400 times a
  50-token question.
- "requests": every request adds 1, weights ignored: round-robin between students, the order the
  gateway used before this rule, kept for comparison.
- "local": the token counter of "tokens", served in an order that keeps each student's prefix
  where it is (`order_local`): a waiting request whose conversation's worker has a free slot goes
  ahead of more-owed classmates while its student's counter is at most LOCAL_BOUND above the least
  waiting counter. That worker holds its prompt (in the slot, or in the student's slot file), so
  its prefill is mostly found in cache instead of recomputed on whichever worker freed first. The
  deficit counter with locality of Cao et al., "Locality-aware Fair Scheduling in LLM Serving"
  (arXiv 2501.14312, DLPM), on the VTC counter. The bound in words: a student owed service is
  passed over only by a classmate who has had at most LOCAL_BOUND tokens of service more than
  them; each pass adds the passer's charge, so after a few passes the owed student is first again.
  With no waiter's worker free (or LOCAL_BOUND 0) it is exactly "tokens".

A request is charged an estimate when it is picked (its prompt, by the byte-based estimate, as if
nothing were cached), its output as it streams (rules.streamed_charge), and settled to the real
count when it ends (`charge` of the real numbers minus what was charged), so a student's long
request weighs on their turn while it runs; a stream cut short is settled to what it relayed.
The gateway keeps the counters and the waiting set in live state (inference/admission/live.py) and the
class replay's simulator calls the same functions.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

POLICIES = ("tokens", "requests", "local")
TOKEN_FAIR = ("tokens", "local")  # the policies that count tokens (the same counter, charge and settling)
DEFAULT_POLICY = "tokens"
# What a token costs the worker, in prompt tokens. Prefill is batched (hundreds of tokens per
# second per slot on the rigs, pp512 ~ 200 t/s on 2 x P40), decode is bandwidth-bound (~12 t/s for
# one stream, shared by the slots decoding at once): with 4 slots busy an output token costs
# about 4 prompt tokens of the worker's time.
PROMPT_TOKEN_COST = 1.0
OUTPUT_TOKEN_COST = 4.0
MIN_WEIGHT = 0.01
# "local": how much more service (counter units: prompt tokens computed + 4 x output tokens, over the
# weight) a student may have had than the most-owed waiting classmate and still take a freed slot on
# their own conversation's worker ahead of them. 4,096 is one agent turn's new tokens at the class
# replay's scale 1 (a tool result and the answer), a fifth of a first agent request; on the rigs, a
# few seconds of one worker's prefill.
LOCAL_BOUND = 4096.0


@dataclass(frozen=True)
class Waiting:
    """One waiting request: its id, its student, when it arrived (seconds, any one clock), the
    student's class weight, and its estimated charge (`charge` of its prompt estimate: under
    "requests" every request's is 1, so equal counters fall back to arrival order)."""

    request: str
    student: str
    arrived: float
    weight: float = 1.0
    cost: float = 0.0
    worker: int | None = None  # the worker holding its conversation's prefix, when it joined ("local")


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"unknown fair-sharing policy {policy!r}: expected one of {', '.join(POLICIES)}")
    return policy


def pick(waiting: Iterable[Waiting], counters: Mapping[str, float]) -> Waiting | None:
    """The request to serve next: least counter first, then the cheaper request (a student lifted
    level with others waits behind none of them for a short question), then earliest arrival,
    then request id."""
    return min(waiting, key=lambda w: _rank(w, counters), default=None)


def order(waiting: Iterable[Waiting], counters: Mapping[str, float]) -> list[Waiting]:
    """Every waiting request in the order they are to be served (`pick` is the first). A request
    that may not take the slot that is free (one waiting for its conversation's worker,
    inference/admission/rules.py `affinity_hold`) lets the next one in this order have it."""
    return sorted(waiting, key=lambda w: _rank(w, counters))


def order_local(waiting: Iterable[Waiting], counters: Mapping[str, float], *, free_workers: Iterable[int],
                bound: float = LOCAL_BOUND) -> list[Waiting]:
    """The "local" order: first the requests whose conversation's worker has a free slot now
    (`free_workers`) and whose student's counter is at most `bound` above the least counter
    waiting, in `order`'s order among themselves; then every other request in `order`'s order.
    So the most-owed student is passed over only by a classmate within `bound` of them."""
    ranked = order(waiting, counters)
    if not ranked:
        return ranked
    free = set(free_workers)
    least = counters.get(ranked[0].student, 0.0)
    ahead = [w for w in ranked if w.worker is not None and w.worker in free
             and counters.get(w.student, 0.0) <= least + bound]
    chosen = {w.request for w in ahead}
    return ahead + [w for w in ranked if w.request not in chosen]


def _rank(waiting: Waiting, counters: Mapping[str, float]) -> tuple[float, float, float, str]:
    return counters.get(waiting.student, 0.0), waiting.cost, waiting.arrived, waiting.request


def lifted(counters: Mapping[str, float], waiting: Iterable[Waiting], student: str) -> float:
    """The counter `student` gets on starting to wait (none of their requests was waiting): at
    least the least counter of the students already waiting."""
    own = counters.get(student, 0.0)
    others = [counters.get(w.student, 0.0) for w in waiting if w.student != student]
    return max(own, min(others)) if others else own


def charge(policy: str, *, computed_prompt_tokens: int, output_tokens: int, weight: float = 1.0) -> float:
    """What one request adds to its student's counter under `policy`."""
    if check_policy(policy) == "requests":
        return 1.0  # "tokens" and "local" count tokens
    cost = max(0, computed_prompt_tokens) * PROMPT_TOKEN_COST + max(0, output_tokens) * OUTPUT_TOKEN_COST
    return cost / max(weight, MIN_WEIGHT)


# --- the same rule in Redis, for every gateway process -----------------------------------------
# KEYS[1] = the line's waiting hash (request -> "student|weight|arrived_ms|cost"), KEYS[2] = its alive
# zset (request -> expiry ms: an entry of a process that died drops out), KEYS[3] = the line's
# counters for the active policy (student -> counter). Every script first drops expired entries.
_PURGE_LUA = """
local function purge(now_ms)
  for _, request in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms)) do
    redis.call('HDEL', KEYS[1], request)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
end
local function entries()
  local all, flat = {}, redis.call('HGETALL', KEYS[1])
  for i = 1, #flat, 2 do
    -- "student|weight|arrived|cost|worker" (worker: its conversation's worker id, or empty)
    local student, weight, arrived, cost, worker = string.match(flat[i + 1],
      '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|?([^|]*)$')
    all[#all + 1] = {request = flat[i], student = student, weight = tonumber(weight), arrived = tonumber(arrived),
                     cost = tonumber(cost), worker = worker or ''}
  end
  return all
end
local function counter(student)
  return tonumber(redis.call('HGET', KEYS[3], student) or '0') or 0
end
"""
# ARGV = request, student, weight, arrived_ms, expires_ms, now_ms, counters ttl ms, cost, worker ('' for none).
# lifted(), then join.
JOIN_LUA = _PURGE_LUA + """
purge(tonumber(ARGV[6]))
local student, least, waiting = ARGV[2], nil, false
for _, entry in ipairs(entries()) do
  if entry.student == student then waiting = true
  else
    local c = counter(entry.student)
    if least == nil or c < least then least = c end
  end
end
if not waiting and least ~= nil and least > counter(student) then
  redis.call('HSET', KEYS[3], student, tostring(least))
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[7]))
end
-- the fifth field only when there is a worker ("local"): a process of the version before reads four
local entry = student .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[8]
if ARGV[9] ~= '' then entry = entry .. '|' .. ARGV[9] end
redis.call('HSET', KEYS[1], ARGV[1], entry)
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[7]))
return 1
"""
# ARGV = now_ms. pick(): the request whose turn it is, or false when none waits.
TURN_LUA = _PURGE_LUA + """
purge(tonumber(ARGV[1]))
local best, key = nil, nil
local function before(a, b)
  for i = 1, 4 do
    if a[i] ~= b[i] then return a[i] < b[i] end
  end
  return false
end
for _, entry in ipairs(entries()) do
  local candidate = {counter(entry.student), entry.cost, entry.arrived, entry.request}
  if best == nil or before(candidate, key) then best, key = entry.request, candidate end
end
return best or false
"""
# ARGV = now_ms, limit, bound, free worker ids... order(), or with a bound >= 0 order_local(): the
# first `limit` requests in the order they are to be served.
ORDER_LUA = _PURGE_LUA + """
purge(tonumber(ARGV[1]))
local all = {}
for _, entry in ipairs(entries()) do
  all[#all + 1] = {counter(entry.student), entry.cost, entry.arrived, entry.request, entry.worker}
end
table.sort(all, function(a, b)
  for i = 1, 4 do
    if a[i] ~= b[i] then return a[i] < b[i] end
  end
  return false
end)
local bound = tonumber(ARGV[3] or '-1')
if bound >= 0 and #all > 0 then
  local free = {}
  for i = 4, #ARGV do free[ARGV[i]] = true end
  local ahead, rest, least = {}, {}, all[1][1]
  for _, item in ipairs(all) do
    if item[5] ~= '' and free[item[5]] and item[1] <= least + bound then ahead[#ahead + 1] = item
    else rest[#rest + 1] = item end
  end
  for _, item in ipairs(rest) do ahead[#ahead + 1] = item end
  all = ahead
end
local chosen = {}
for i = 1, math.min(#all, tonumber(ARGV[2])) do chosen[i] = all[i][4] end
return chosen
"""
# ARGV = request, student, amount, counters ttl ms. Takes the request out of the line and charges
# its student; 0 when it had already left (gave up).
SERVED_LUA = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HINCRBYFLOAT', KEYS[3], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[4]))
return 1
"""
