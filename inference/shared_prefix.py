"""A system prompt's public start, computed once per worker and reused across students
(`OCS_SHARED_PREFIX_K`; the rule and its privacy argument: core/shared_prefix.py).

On a handover whose slot still holds no prompt of this student's (no slot file of their own was
restored, inference/slot_files.py), the gateway adds the student to the senders of their system
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
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from prometheus_client import Counter

from core.live import LiveStateUnavailable
from core.shared_prefix import MIN_K, MIN_PUBLIC_BLOCKS, block_names, leading_message, public_blocks, public_text
from inference import slot_files, upstream
from inference.admission import Slot, live_state
from inference.upstream import TRANSPORT_ERRORS

log = logging.getLogger("ocs.shared_prefix")

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
        senders = await live_state().prefix_senders(names, student, SENDERS_TTL_S)
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
