"""A prompt prefix many students send, reusable across them only once k distinct students sent it.

Every request of a coding agent begins with its client's system prompt (the Copilot CLI's is ~5,400
tokens, and on a rig every first turn on a worker computes it again). Cache isolation
(inference/admission/slot_owners.py) forbids reusing one student's prompt for another, because the reuse shows in
the returned counts and in the time to first token. This module is the one exception, and its rule:

- Only the request's leading system (or developer) message is ever shared, cut into blocks of
  BLOCK_CHARS characters. Block i is named by a keyed hash of blocks 0..i (a chain), so a name says
  nothing of the text and a block is only ever "the same" as another when all text before it is too.
- The gateway counts, per block name, the distinct students who sent it (the live state, with a
  TTL). The public prefix of a request is its longest run of leading blocks each sent by at least
  k students (`OCS_SHARED_PREFIX_K`; 0, the default, turns it off; under MIN_K it is refused: with
  k = 2 a prober and one classmate make a block public, so a prober could confirm a guess of one
  classmate's block). A trailing part shorter than a block is never public.
- Only the public prefix's text is ever computed into a shared slot file, so what another student can
  find in the cache (by counts or by timing) is at most text that k distinct students, the prober
  included, sent as the start of their system prompt: a prober learns that k - 1 others sent it,
  never what one classmate alone wrote. Text that k - 1 others did send (a system prompt the teacher
  handed out) is no secret from the class by this rule; choose k above the size of any group whose
  shared text must stay private, and above the number of accounts one person could use.

The rule first (pure, no I/O: the names, the count, the public text), then its use.

A system prompt's public start, computed once per worker and reused across students
(`OCS_SHARED_PREFIX_K`).

On a handover whose slot still holds no prompt of this student's (no slot file of their own was
restored, inference/admission/slot_files.py), the gateway adds the student to the senders of their system
prompt's blocks (only here: a student's first turn on a worker is always a handover) and finds its
public prefix. If there is one:

1. restore: the worker has this prefix's shared file (this process wrote it): it is loaded into the
   slot, which then holds the public text and nothing else;
2. else prime: the public text alone, rendered by the worker's own chat template
   (`/apply-template`), is computed into the slot (`/completion`, `n_predict: 0`) and saved as the
   shared file for the next students.

Either way the request then reuses the slot (`cache_prompt`): the worker finds the public prefix and
computes only the rest, and the counts it returns say so (they describe text k students sent).
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
MAX_BLOCKS = 128  # 128 kB of system prompt: more than any client sends today
MIN_PUBLIC_BLOCKS = 2  # a shorter public prefix is not worth a slot-file round trip
LEADING_ROLES = ("system", "developer")
MIN_K = 3


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
    """How many leading blocks are public: each sent by at least k distinct students (k >= MIN_K).
    Fewer than MIN_PUBLIC_BLOCKS counts as none."""
    if k < MIN_K:
        return 0
    count = 0
    for seen in senders:
        if seen < k:
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


async def _prime(slot: Slot, role: str, text: str) -> bool:
    """Compute `text` alone, as the worker's template renders a leading `role` message, into the
    slot (its cache then holds the public prefix and nothing else); True when it worked."""
    base, headers = slot.worker.base_url, slot.worker.upstream_headers
    try:
        status, templated = await _read_json(f"{base}/apply-template",
                                             {"messages": [{"role": role, "content": text}]}, headers)
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
    """After slot_files.prepare: a handed-over slot that holds none of this student's prompt gets
    the public prefix of their system prompt, if it has one (`own_prefix` then turns on)."""
    k = settings.OCS["SHARED_PREFIX_K"]
    if k < MIN_K or not slot.handover or slot.own_prefix or not slot_files.enabled(slot):
        return
    leading = leading_message(body)
    if leading is None:
        return
    role, text = leading
    names = block_names(text, _secret())
    if len(names) < MIN_PUBLIC_BLOCKS:
        return
    try:
        senders = await admission_live().prefix_senders(names, student, SENDERS_TTL_S)
    except LiveStateUnavailable:
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
    if not await _prime(slot, role, public_text(text, public)):
        OUTCOMES.labels("failed").inc()
        return
    OUTCOMES.labels("primed").inc()
    slot.own_prefix = True  # the slot now holds the public text alone
    if await slot_files.action(slot, "save", name):
        if len(_files) >= MAX_KNOWN_FILES:
            _files.pop(next(iter(_files)))
        _files[known] = None
