"""A student's prompt kept across a slot handover: one slot file per student and worker.

With cache isolation (inference/admission/slot_owners.py) a slot that passes to another student is recomputed
from scratch, and the student it passed from loses their prefix: with more active students than
slots, nearly every agent turn recomputed its whole prompt (docs/research/class-replay.md). Where
the worker keeps slot files (llama-server `--slot-save-path`, which fleet/local_worker.py always
passes), a handover does two quick things before the new prompt is sent:

1. save: the slot's state (the previous owner's tokens and KV cache) goes to the previous
   owner's file on the worker (`/slots/<i>?action=save`);
2. restore: if the new student has a file of their own on this worker, it is loaded into the
   slot (`/slots/<i>?action=restore`) and their prompt may then reuse it (`cache_prompt`).

A file is named by the gateway from the worker and the student (an HMAC under the site's secret,
so names say nothing) and only ever restored for that student: the worker's prompt cache becomes
partitioned by student, which no prompt can cross (unlike llama-server's own host-RAM cache, which
matches any saved prompt and stays off: fleet/local_worker.py ISOLATION_ARGS). Each save replaces
the student's file, so a worker holds at most one file per student, of at most one slot's context.

Any failure only costs the reuse: a worker without `--slot-save-path` (501) is not asked again
for a while, a failed save or restore leaves the request computing its whole prompt.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import time

from django.conf import settings
from prometheus_client import Counter, Histogram

from inference import upstream
from inference.admission.line import Slot
from inference.upstream import TRANSPORT_ERRORS

log = logging.getLogger("ocs.slot_files")

UNSUPPORTED_RECHECK_S = 300.0  # a worker that answered 501 (no --slot-save-path) is asked again after this

ACTIONS = Counter("ocs_slot_file_actions", "Slot file saves and restores on handovers, by outcome",
                  ["action", "outcome"])
ACTION_SECONDS = Histogram("ocs_slot_file_seconds", "Time a slot file save or restore took, seen by the gateway",
                           ["action"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))

_unsupported: dict[int, float] = {}  # worker id -> until (monotonic)


def file_name(worker_id: int, student: str) -> str:
    """The student's slot file on that worker: letters and digits only (llama-server's
    fs_validate_filename), derived under the site's secret."""
    digest = hmac.new(settings.SECRET_KEY.encode(), f"slot-file:{worker_id}:{student}".encode(), hashlib.sha256)
    return f"ocs-{digest.hexdigest()[:40]}.bin"


def enabled(slot: Slot) -> bool:
    if not settings.OCS["SLOT_FILES"] or slot.index is None:
        return False
    until = _unsupported.get(slot.worker.id)
    return until is None or until <= time.monotonic()


async def action(slot: Slot, action: str, filename: str) -> bool:
    """One save or restore of the file `filename` out of/into the claimed slot; True when it worked."""
    url = f"{slot.worker.base_url}/slots/{slot.index}?action={action}"
    started = time.monotonic()
    try:
        response = await upstream.post(url, {"filename": filename}, slot.worker.upstream_headers)
        try:
            async for _ in response.aiter_raw():
                pass
        finally:
            await response.aclose()
    except TRANSPORT_ERRORS as exc:
        ACTIONS.labels(action, "error").inc()
        log.warning("slot file %s on %s slot %s failed: %s", action, slot.worker.name, slot.index, type(exc).__name__)
        return False
    ACTION_SECONDS.labels(action).observe(time.monotonic() - started)
    if response.status_code == 501:
        _unsupported[slot.worker.id] = time.monotonic() + UNSUPPORTED_RECHECK_S
        ACTIONS.labels(action, "unsupported").inc()
        return False
    # A restore of a file that is not there (never saved, or the worker restarted) answers 400.
    ok = response.status_code == 200
    ACTIONS.labels(action, "ok" if ok else "failed").inc()
    return ok


async def prepare(slot: Slot, student: str) -> None:
    """Before a handover's prompt is sent: save the previous owner's prompt to their file, then
    restore this student's own, after which the slot holds their prefix (`own_prefix`)."""
    if not slot.handover or not enabled(slot):
        return
    if slot.previous:
        await action(slot, "save", file_name(slot.worker.id, slot.previous))
    # (a 501 to the save has just turned the worker's slot files off: no restore is asked for)
    if slot.restore and enabled(slot) and await action(slot, "restore", file_name(slot.worker.id, student)):
        slot.own_prefix = True
