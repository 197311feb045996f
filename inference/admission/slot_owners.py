"""Which slot of a worker a request gets, and whose prompt that slot last held. Pure: no I/O.

A worker slot's KV cache keeps the last prompt it processed, and llama-server reuses the longest
common prefix with the next prompt on that slot (`cache_prompt`). Reuse across students leaks:
the returned cache counts and the time to first token both say how much of a guess matched a
classmate's prompt. So the gateway pins every request to a slot (`id_slot`) and remembers, per
slot, the student who last sent a prompt to it (the owner). A request may reuse the slot's cache
only when it is the owner's; on a handover the worker is told not to reuse (`cache_prompt:
false`): it computes the whole prompt, which then stays in the slot for the new owner's next turn.

A claim of the owner's own slot keeps the record. A claim of any other slot (a handover) first
records nobody (PENDING): the slot holds no one's usable prefix until the worker has processed the
new student's prompt, and only then (its first byte) is the new owner confirmed
(`confirm_slot`). A request that fails or leaves in between leaves the slot owned by nobody, so
whatever it still holds is never reused. A slot with no record (new worker, live state reset)
counts as foreign.

A handover need not cost the previous owner their prefix (inference/admission/slot_files.py). Where the
worker keeps slot files (`--slot-save-path`), the claim says whose prompt the slot held
(`previous`: save it to that student's file before use) and whether the new student has a file of
their own on this worker (`restore`: load it into the slot, then reuse). One file per student and
worker, named by the gateway, restored only for its own student: a partition of the worker's
prompt cache by student that no prompt can cross.

Which free slot: the one this conversation used last, else one this student used last (their
prefix is there), else one nobody has used, else the least recently used (evicting the prefix
least likely to be wanted again).
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

# A lease id on a worker resource names its slot's index and the student holding it:
# "<index>.<student>.<random hex>" (students are user ids: no dots).
SLOT_SEPARATOR = "."


@dataclass(frozen=True)
class SlotOwner:
    student: str
    conversation: str
    last_used_ms: int


# The owner recorded for a slot between a handover's claim and its confirmation: nobody.
PENDING = ""


@dataclass(frozen=True)
class SlotClaim:
    """A claimed slot: its lease id (release it with that), its index (llama-server's
    `id_slot`), and whether its cache holds this student's own prompt (`cache_prompt` may be on).
    On a handover: `previous`, the classmate whose prompt it holds ("" for none), and `restore`,
    whether this student has a slot file on the worker."""

    lease_id: str
    index: int
    own_prefix: bool
    previous: str = ""
    restore: bool = False

    @property
    def handover(self) -> bool:
        """The slot's owner is confirmed only once the worker has processed this prompt."""
        return not self.own_prefix


def lease_slot(lease_id: str) -> int | None:
    head, sep, _ = lease_id.partition(SLOT_SEPARATOR)
    return int(head) if sep and head.isdigit() else None


def lease_token(student: str, random_hex: str) -> str:
    """What follows the index in a lease id: the holder, then a random part."""
    return f"{student}{SLOT_SEPARATOR}{random_hex}"


def lease_student(lease_id: str) -> str | None:
    """The student holding the slot a lease id names (None: a lease id of another form)."""
    parts = lease_id.split(SLOT_SEPARATOR, 2)
    return parts[1] if len(parts) == 3 else None


def pick_slot(*, capacity: int, used: set[int], owners: dict[int, SlotOwner], student: str,
              conversation: str, first: int = 0, prefer: int | None = None) -> int | None:
    """The free slot index to claim (first <= index < capacity), or None when all are in use.
    `prefer`: a slot taken first whenever it is free (the light lane, inference/admission/rules.py)."""
    if prefer is not None and first <= prefer < capacity and prefer not in used:
        return prefer
    best: tuple[int, int] | None = None
    chosen: int | None = None
    for index in range(first, capacity):
        if index in used:
            continue
        owner = owners.get(index)
        if owner is None:
            rank = (2, 0)
        elif owner.student == student and conversation and owner.conversation == conversation:
            rank = (0, -owner.last_used_ms)
        elif owner.student == student:
            rank = (1, -owner.last_used_ms)
        else:
            rank = (3, owner.last_used_ms)
        if best is None or rank < best:
            best, chosen = rank, index
    return chosen


def holds_own_prefix(previous: SlotOwner | None, student: str) -> bool:
    """Whether a slot last held by `previous` holds `student`'s own prompt (its cache may be reused)."""
    return previous is not None and previous.student != PENDING and previous.student == student


def handover(previous: SlotOwner | None, student: str, files: Collection[str], *, light: bool = False,
             lane_slot: bool = False) -> tuple[str, bool]:
    """On claiming a slot last held by `previous`: (whose prompt to save to their file first, ""
    for none; whether to restore `student`'s own file). `files`: the students with a slot file on
    this worker. Nothing to do when the slot holds the student's own prompt.

    The light lane (inference/admission/rules.lane): each slot-file step is a request the worker
    answers only between two steps of its loop, so on a busy worker a save and a restore put two
    whole steps before the prompt is even taken in. A light request (`light`: a short prompt the
    lane gave a preferred slot) computes its prompt in less than that, so it does not restore its
    file; and the lane's own slot (`lane_slot`), which only light prompts ever hold, is not saved."""
    if holds_own_prefix(previous, student):
        return "", False
    keep = previous.student if previous is not None and previous.student != PENDING else ""
    if light:
        return ("" if lane_slot else keep), False
    return keep, student in files


# The same choice in Redis, atomic with the claim. KEYS[1] = the worker's lease zset, KEYS[2] = its
# owner hash (field = slot index, value = "student|conversation|last_used_ms"; field "file:<student>"
# = when that student's slot file was last written). ARGV = capacity, now_ms, expires_ms, random part
# of the lease id, student, conversation, owner ttl ms, first claimable index, preferred index (-1:
# none: a request given one is light, handover's `light`) [, affinity worker, affinity ttl ms with
# KEYS[3]]. Returns {index, own (1/0), previous owner to save ("" none), restore (1/0)}, or
# {-1, 0, '', 0} when every slot is in use.
CLAIM_SLOT_LUA = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
local capacity = tonumber(ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= capacity then return {-1, 0, '', 0} end
local used = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local index = string.match(member, '^(%d+)%.')
  if index then used[tonumber(index)] = true end
end
local student, conversation = ARGV[5], ARGV[6]
local first, prefer = tonumber(ARGV[8]), tonumber(ARGV[9])
local light = prefer >= 0
local chosen, best_class, best_order, chosen_own, chosen_owner = -1, 99, 0, 0, ''
for index = first, capacity - 1 do
  if not used[index] then
    local value = redis.call('HGET', KEYS[2], tostring(index))
    local class, order, own, owner = 2, 0, 0, ''
    if value then
      local owner_conversation, last
      owner, owner_conversation, last = string.match(value, '^([^|]*)|([^|]*)|(%d+)$')
      owner = owner or ''
      last = tonumber(last) or 0
      if owner ~= '' and owner == student and conversation ~= '' and owner_conversation == conversation then
        class, order, own = 0, -last, 1
      elseif owner ~= '' and owner == student then
        class, order, own = 1, -last, 1
      else
        class, order = 3, last
      end
    end
    if index == prefer then class, order = -1, 0 end
    if class < best_class or (class == best_class and order < best_order) then
      chosen, best_class, best_order, chosen_own, chosen_owner = index, class, order, own, owner
    end
  end
end
if chosen < 0 then return {-1, 0, '', 0} end
redis.call('ZADD', KEYS[1], ARGV[3], tostring(chosen) .. '.' .. ARGV[4])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) - tonumber(ARGV[2]) + 60000)
local previous, restore = '', 0
if chosen_own == 1 then
  redis.call('HSET', KEYS[2], tostring(chosen), student .. '|' .. conversation .. '|' .. ARGV[2])
else
  redis.call('HSET', KEYS[2], tostring(chosen), '||' .. ARGV[2])
  previous = chosen_owner
  if light and chosen == prefer then previous = '' end
  if not light and redis.call('HEXISTS', KEYS[2], 'file:' .. student) == 1 then restore = 1 end
  if previous ~= '' then redis.call('HSET', KEYS[2], 'file:' .. previous, ARGV[2]) end
end
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[7]))
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[10], 'PX', tonumber(ARGV[11])) end
return {chosen, chosen_own, previous, restore}
"""
# KEYS[1] = the worker's owner hash; ARGV = slot index, "student|conversation|now_ms", owner ttl ms.
CONFIRM_SLOT_LUA = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""
