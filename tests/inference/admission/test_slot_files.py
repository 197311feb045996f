"""What a handover asks of the worker (inference/admission/slot_files.py), against a recording stand-in
for the worker's HTTP side; tests/integration/test_cache_isolation.py runs it on a real one."""
from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from core.lease import Lease
from fleet.scheduler import WorkerView
from inference.admission import slot_files
from inference.admission.line import Slot

WORKER = WorkerView(id=7, name="w7", base_url="http://127.0.0.1:9", pool_id=1, pool_name="production",
                    model_id="m", slots=4, state="healthy")


class Answer:
    def __init__(self, status: int) -> None:
        self.status_code = status

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield b"{}"

    async def aclose(self) -> None:
        pass


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Records every POST; answers each action with `status[action]`."""
    state: dict[str, Any] = {"calls": [], "status": {"save": 200, "restore": 200}}

    async def post(url: str, body: dict[str, Any], headers: Any = None) -> Answer:
        action = url.rsplit("action=", 1)[1]
        state["calls"].append((url.split("?")[0].rsplit("/", 1)[1], action, body["filename"]))
        return Answer(state["status"][action])

    monkeypatch.setattr(slot_files.upstream, "post", post)
    monkeypatch.setattr(slot_files, "_unsupported", {})
    return state


def handover(previous: str = "", restore: bool = False, index: int = 2) -> Slot:
    return Slot(worker=WORKER, lease=Lease("worker:7", "x"), reason="test", index=index, own_prefix=False,
                previous=previous, restore=restore, handover=True)


def test_a_handover_saves_the_classmate_then_restores_the_students_own_file(worker: dict[str, Any]) -> None:
    slot = handover(previous="11", restore=True)
    asyncio.run(slot_files.prepare(slot, "12"))
    assert worker["calls"] == [("2", "save", slot_files.file_name(7, "11")),
                               ("2", "restore", slot_files.file_name(7, "12"))]
    assert slot.own_prefix  # the slot holds the student's own prompt now: reuse it


def test_file_names_are_per_student_and_worker_and_say_nothing(worker: dict[str, Any]) -> None:
    names = {slot_files.file_name(w, s) for w in (1, 2) for s in ("11", "12")}
    assert len(names) == 4
    # an opaque digest (letters and digits: llama-server's filename rule), not the student's id
    assert all(re.fullmatch(r"ocs-[0-9a-f]{40}\.bin", n) for n in names)
    # keyed by the site's secret: nobody who lacks it can tell whose file a name is
    with override_settings(SECRET_KEY="another-site-secret-" + "x" * 40):
        assert slot_files.file_name(1, "11") not in names


def test_nothing_is_asked_of_an_own_slot_or_with_slot_files_off(worker: dict[str, Any]) -> None:
    own = Slot(worker=WORKER, lease=Lease("worker:7", "x"), reason="test", index=1, own_prefix=True)
    asyncio.run(slot_files.prepare(own, "12"))
    with override_settings(OCS={**settings.OCS, "SLOT_FILES": False}):
        off = handover(previous="11", restore=True)
        asyncio.run(slot_files.prepare(off, "12"))
    assert worker["calls"] == [] and not off.own_prefix


def test_a_failed_restore_leaves_the_prompt_computed_whole(worker: dict[str, Any]) -> None:
    worker["status"]["restore"] = 400  # the file is gone (a restarted worker)
    slot = handover(previous="11", restore=True)
    asyncio.run(slot_files.prepare(slot, "12"))
    assert not slot.own_prefix


def test_a_worker_without_slot_files_is_not_asked_again_for_a_while(worker: dict[str, Any]) -> None:
    worker["status"] = {"save": 501, "restore": 501}  # started without --slot-save-path
    first = handover(previous="11", restore=True)
    asyncio.run(slot_files.prepare(first, "12"))
    assert [action for _, action, _ in worker["calls"]] == ["save"] and not first.own_prefix
    asyncio.run(slot_files.prepare(handover(previous="13", restore=True), "14"))
    assert len(worker["calls"]) == 1
