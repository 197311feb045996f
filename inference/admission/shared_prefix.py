"""The constant prefix a client sends (system prompt, then tool definitions), reused across students
only once k students other than the requester sent it.

Every request of a coding agent begins with its client's system prompt and tool definitions (the
Copilot CLI's ~5,400 tokens, Claude Code's ~20,000 with its tools as a Qwen template renders them),
and on a rig every first turn on a worker computes them again. Cache isolation
(inference/admission/slot_owners.py) forbids reusing one student's prompt for another, because the
reuse shows in the returned counts and in the time to first token. This module is the one
exception, and its rule:

- Only the request's constant prefix is ever shared: its leading system (or developer) message,
  then its tool definitions (each as its JSON), read as one text and cut into blocks of BLOCK_CHARS
  characters. Block i is named by a keyed hash of blocks 0..i (a chain), so a name says nothing of
  the text and a block is only ever "the same" as another when all text before it is too.
- The gateway counts, per block name, the distinct students (user ids: one student's several keys
  count once) who sent it (the live state, with a TTL). The public prefix of a request is its
  longest run of leading blocks each sent by at least k students **other than the requester**
  (`OCS_SHARED_PREFIX_K`, 5 by default; 0 turns it off; under MIN_K it is refused). A trailing part
  shorter than a block is never public.
- Why that holds against k - 1 colluding classmates: a clique of c students (the prober among them)
  who all send a guess of a victim's block make, for the prober, c - 1 other senders; with the
  victim, c. It turns public only when c >= k. So a clique of at most k - 1 never confirms a guess,
  whatever it sends and however often: what a prober can find in the cache (by counts or by time)
  is text that at least k - c + 1 >= 2 students outside the clique sent, never what one classmate
  alone wrote. (The rule before counted the prober too: a victim and k - 1 guessers sufficed, and
  two classmates confirmed a locker PIN at k = 3.) Not covered: a clique of k or more, text that
  k others did send (a system prompt the teacher handed out is no secret from the class), a person
  holding several accounts.

The rule first (pure, no I/O: the names, the count, the public text), then its use.

On every handover of a pinned slot (a student's first turn on a worker is always one) the gateway
adds the student to the senders of their constant prefix's blocks; when the slot then holds none of
their own prompt (no slot file of theirs was restored, inference/admission/slot_files.py) it finds
the prefix's public part. If there is one:

1. restore: the worker has this prefix's shared file (this process wrote it): it is loaded into the
   slot, which then holds the public text and nothing else;
2. else prime: the public text alone (the system text, then the whole tool definitions that lie
   inside it), rendered by the worker's own chat template (`/apply-template`), is computed into the
   slot (`/completion`, `n_predict: 0`) and saved as the shared file for the next students.

Either way the request then reuses the slot (`cache_prompt`): the worker finds the public prefix and
computes only the rest, and the counts it returns say so (they describe text k others sent).
Priming costs nothing the request would not compute anyway, plus one save. Each gateway process
keeps its own list of the files it wrote, so a worker is primed at most once per prefix and
process; a worker that lost its files (a restart) answers the restore with an error and is primed
again. Any failure only costs the reuse.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from prometheus_client import Counter

from core.live import LiveStateUnavailable
from inference import upstream
from inference.admission import slot_files
from inference.admission.line import Slot
from inference.admission.live import admission_live
from inference.upstream import TRANSPORT_ERRORS

log = logging.getLogger("ocs.shared_prefix")

BLOCK_CHARS = 1024  # ~250-300 tokens of English or JSON
MAX_BLOCKS = 256  # 256 kB of system prompt and tools: Claude Code's 24 tools are ~64 kB of JSON
MIN_PUBLIC_BLOCKS = 2  # a shorter public prefix is not worth a slot-file round trip
LEADING_ROLES = ("system", "developer")
MIN_K = 3  # a pair of colluders never confirms a guess
TOOL_SEPARATOR = "\x00"  # never inside a tool's JSON (json.dumps escapes it): a tool starts after it


@dataclass(frozen=True)
class ConstantPrefix:
    """What a client sends first and the same for everyone on its version: the leading system (or
    developer) message and the tool definitions, in the order the worker's template renders them
    (the system text, then the tools). `text` is what the block names are taken over."""

    role: str
    system: str
    tools: tuple[Mapping[str, Any], ...]

    @property
    def text(self) -> str:
        return self.system + "".join(TOOL_SEPARATOR + _tool_json(tool) for tool in self.tools)

    def public_part(self, chars: int) -> tuple[str, tuple[Mapping[str, Any], ...]]:
        """(system text, tools) lying wholly inside the first `chars` characters of `text`: the
        system text cut there, or the whole system text and the tools that end there."""
        if chars <= len(self.system):
            return self.system[:chars], ()
        end, tools = len(self.system), []
        for tool in self.tools:
            end += len(TOOL_SEPARATOR) + len(_tool_json(tool))
            if end > chars:
                break
            tools.append(tool)
        return self.system, tuple(tools)


def _tool_json(tool: Mapping[str, Any]) -> str:
    return json.dumps(tool, ensure_ascii=False, separators=(",", ":"))


def leading_message(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(role, text) of the chat body's first message when it is a system or developer message
    whose content is a string, else None (a request without one shares nothing)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
        return None
    first = messages[0]
    role, content = first.get("role"), first.get("content")
    if role not in LEADING_ROLES or not isinstance(content, str):
        return None
    return role, content


def constant_prefix(body: Mapping[str, Any]) -> ConstantPrefix | None:
    """The chat body's constant prefix: its leading system message and its tools (None: no
    leading system message, nothing shared)."""
    leading = leading_message(body)
    if leading is None:
        return None
    tools = body.get("tools")
    listed = tuple(tool for tool in tools if isinstance(tool, dict)) if isinstance(tools, list) else ()
    return ConstantPrefix(role=leading[0], system=leading[1], tools=listed)


def block_names(text: str, secret: bytes) -> list[str]:
    """The chained, keyed names of `text`'s whole blocks (at most MAX_BLOCKS)."""
    names: list[str] = []
    previous = b""
    for index in range(min(len(text) // BLOCK_CHARS, MAX_BLOCKS)):
        block = text[index * BLOCK_CHARS:(index + 1) * BLOCK_CHARS].encode()
        digest = hmac.new(secret, previous + block, hashlib.sha256).digest()[:16]
        names.append(digest.hex())
        previous = digest
    return names


def public_blocks(senders: Sequence[int], k: int) -> int:
    """How many leading blocks are public to a requester. `senders`: per block, the distinct students
    who sent it, the requester among them (prefix_senders adds them before it counts); a block is
    public when at least k of them are students other than the requester (k >= MIN_K). Fewer than
    MIN_PUBLIC_BLOCKS counts as none."""
    if k < MIN_K:
        return 0
    count = 0
    for seen in senders:
        if seen - 1 < k:
            break
        count += 1
    return count if count >= MIN_PUBLIC_BLOCKS else 0


def public_text(text: str, blocks: int) -> str:
    return text[:blocks * BLOCK_CHARS]


SENDERS_TTL_S = 7 * 86400.0  # a block stops counting as sent by a student a week after their last send
MAX_KNOWN_FILES = 10_000

OUTCOMES = Counter("ocs_shared_prefix", "Handovers that looked for a public system-prompt prefix, by what came of it",
                   ["outcome"])  # private (fewer than k senders), restored, primed, failed

_files: dict[tuple[int, str], None] = {}  # (worker id, last public block's name): this process wrote it


def _secret() -> bytes:
    return hmac.new(settings.SECRET_KEY.encode(), b"shared-prefix", hashlib.sha256).digest()


def file_name(worker_id: int, block: str) -> str:
    digest = hmac.new(settings.SECRET_KEY.encode(), f"shared-prefix-file:{worker_id}:{block}".encode(),
                      hashlib.sha256)
    return f"ocs-shared-{digest.hexdigest()[:40]}.bin"


async def _read_json(url: str, body: dict[str, Any], headers: Mapping[str, str]) -> tuple[int, Any]:
    response = await upstream.post(url, body, headers)
    try:
        content = b"".join([chunk async for chunk in response.aiter_raw()])
    finally:
        await response.aclose()
    try:
        return response.status_code, json.loads(content or b"null")
    except ValueError:
        return response.status_code, None


async def _prime(slot: Slot, role: str, system: str, tools: Sequence[Mapping[str, Any]]) -> bool:
    """Compute the public part alone (a leading `role` message of `system`, with `tools`), as the
    worker's template renders it, into the slot (its cache then holds the public prefix and nothing
    else); True when it worked."""
    base, headers = slot.worker.base_url, slot.worker.upstream_headers
    template: dict[str, Any] = {"messages": [{"role": role, "content": system}]}
    if tools:
        template["tools"] = list(tools)
    try:
        status, templated = await _read_json(f"{base}/apply-template", template, headers)
        prompt = templated.get("prompt") if status == 200 and isinstance(templated, dict) else None
        if not isinstance(prompt, str):
            return False
        status, _ = await _read_json(f"{base}/completion", {"prompt": prompt, "n_predict": 0, "id_slot": slot.index,
                                                            "cache_prompt": False}, headers)
    except TRANSPORT_ERRORS as exc:
        log.warning("priming a shared prefix on %s slot %s failed: %s", slot.worker.name, slot.index,
                    type(exc).__name__)
        return False
    return status == 200


async def prepare(slot: Slot, student: str, body: Mapping[str, Any]) -> None:
    """After slot_files.prepare, on a handover: count `student` among the senders of their constant
    prefix's blocks (even when their own slot file was restored: every sender counts), then give a
    slot that holds none of their prompt the prefix's public part, if it has one (`own_prefix`
    then turns on)."""
    k = settings.OCS["SHARED_PREFIX_K"]
    if k < MIN_K or not slot.handover or not slot_files.enabled(slot):
        return
    prefix = constant_prefix(body)
    if prefix is None:
        return
    names = block_names(prefix.text, _secret())
    if len(names) < MIN_PUBLIC_BLOCKS:
        return
    try:
        senders = await admission_live().prefix_senders(names, student, SENDERS_TTL_S)
    except LiveStateUnavailable:
        return
    if slot.own_prefix:
        return
    public = public_blocks(senders, k)
    if not public:
        OUTCOMES.labels("private").inc()
        return
    known = (slot.worker.id, names[public - 1])
    name = file_name(*known)
    if known in _files:
        if await slot_files.action(slot, "restore", name):
            OUTCOMES.labels("restored").inc()
            slot.own_prefix = True
            return
        _files.pop(known, None)
    system, tools = prefix.public_part(public * BLOCK_CHARS)
    if not await _prime(slot, prefix.role, system, tools):
        OUTCOMES.labels("failed").inc()
        return
    OUTCOMES.labels("primed").inc()
    slot.own_prefix = True  # the slot now holds the public text alone
    if await slot_files.action(slot, "save", name):
        if len(_files) >= MAX_KNOWN_FILES:
            _files.pop(next(iter(_files)))
        _files[known] = None
