"""What a handover asks of the worker for a shared system prompt (inference/admission/shared_prefix.py), against
a recording stand-in for the worker; tests/integration/test_shared_prefix.py runs it on a real one."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from core.lease import Lease
from fleet.scheduler import WorkerView
from inference.admission import shared_prefix, slot_files
from inference.admission.line import Slot
from inference.admission.shared_prefix import BLOCK_CHARS
from ocsweb.live import SiteInProcessLiveState

WORKER = WorkerView(id=7, name="w7", base_url="http://127.0.0.1:9", pool_id=1, pool_name="production",
                    model_id="m", slots=4, state="healthy")
SYSTEM = "x" * (3 * BLOCK_CHARS + 100)  # three whole blocks and a private tail


class Answer:
    def __init__(self, status: int, body: Any = None) -> None:
        self.status_code, self._body = status, json.dumps(body or {}).encode()

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield self._body

    async def aclose(self) -> None:
        pass


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Records every POST (route, body); answers with `status[action or route]`, 200 if not set."""
    state: dict[str, Any] = {"calls": [], "status": {}}

    async def post(url: str, body: dict[str, Any], headers: Any = None) -> Answer:
        route = url.split("127.0.0.1:9", 1)[1]
        state["calls"].append((route, body))
        status = state["status"].get(route.rsplit("=", 1)[1] if "action=" in route else route.lstrip("/"), 200)
        return Answer(status, {"prompt": "<|im_start|>system\n" + body["messages"][0]["content"]}
                      if route == "/apply-template" else {})

    monkeypatch.setattr(slot_files.upstream, "post", post)
    monkeypatch.setattr(slot_files, "_unsupported", {})
    monkeypatch.setattr(shared_prefix, "_files", {})
    live = SiteInProcessLiveState()
    monkeypatch.setattr(shared_prefix, "admission_live", lambda: live)
    return state


def handover(index: int = 2, *, own: bool = False) -> Slot:
    return Slot(worker=WORKER, lease=Lease("worker:7", "x"), reason="test", index=index, handover=True,
                own_prefix=own)


def turn(student: str, *, k: int = 3, system: str = SYSTEM, tools: list[dict[str, Any]] | None = None,
         own: bool = False) -> Slot:
    slot = handover(own=own)
    body: dict[str, Any] = {"messages": [{"role": "system", "content": system},
                                         {"role": "user", "content": f"secret of {student}"}]}
    if tools:
        body["tools"] = tools
    with override_settings(OCS={**settings.OCS, "SHARED_PREFIX_K": k}):
        asyncio.run(shared_prefix.prepare(slot, student, body))
    return slot


def routes(state: dict[str, Any]) -> list[str]:
    return [route for route, _ in state["calls"]]


def test_the_first_student_after_k_others_primes_the_public_blocks_alone_and_the_next_restores_them(
        worker: dict[str, Any]) -> None:
    for student in "123":  # 0, 1, then 2 others had sent it: under k = 3
        assert not turn(student).own_prefix
    assert worker["calls"] == []
    third = turn("4")
    assert third.own_prefix
    (_, template), (_, completion), (save_route, save) = worker["calls"]
    assert template["messages"] == [{"role": "system", "content": SYSTEM[:3 * BLOCK_CHARS]}]  # never the tail
    assert completion == {"prompt": "<|im_start|>system\n" + SYSTEM[:3 * BLOCK_CHARS], "n_predict": 0,
                          "id_slot": 2, "cache_prompt": False}
    assert save_route == "/slots/2?action=save" and save["filename"].startswith("ocs-shared-")
    worker["calls"].clear()
    assert turn("5").own_prefix
    assert worker["calls"] == [("/slots/2?action=restore", save)]


def test_a_lost_file_is_primed_again_and_a_failed_prime_leaves_the_slot_unused(worker: dict[str, Any]) -> None:
    for student in "1234":
        turn(student)
    worker["calls"].clear()
    worker["status"]["restore"] = 400  # the worker restarted: its files are gone
    assert turn("5").own_prefix
    assert routes(worker) == ["/slots/2?action=restore", "/apply-template", "/completion", "/slots/2?action=save"]
    worker["calls"].clear()
    worker["status"]["completion"] = 500
    shared_prefix._files.clear()
    assert not turn("6").own_prefix  # the slot is computed whole, as without the rule


def test_nothing_is_asked_when_off_for_a_short_system_prompt_or_an_own_slot(worker: dict[str, Any]) -> None:
    for student in "1234":
        assert not turn(student, k=0).own_prefix
        assert not turn(student, system="short system prompt " * 50).own_prefix  # under two blocks
    own = Slot(worker=WORKER, lease=Lease("worker:7", "x"), reason="test", index=1, own_prefix=True)
    with override_settings(OCS={**settings.OCS, "SHARED_PREFIX_K": 3}):
        asyncio.run(shared_prefix.prepare(own, "9", {"messages": [{"role": "system", "content": SYSTEM}]}))
    assert worker["calls"] == []


def test_one_students_several_turns_or_keys_count_once_and_a_clique_under_k_never_gets_the_prefix(
        worker: dict[str, Any]) -> None:
    """Senders are students (user ids), not keys or turns: the victim and k - 1 = 2 colluders, each
    sending the victim's system prompt many times, never make it public to any of them."""
    for _ in range(4):
        for student in ("victim", "accomplice", "prober"):
            assert not turn(student).own_prefix
    assert worker["calls"] == []


def test_a_student_whose_own_file_was_restored_is_still_counted(worker: dict[str, Any]) -> None:
    for student in "123":
        assert turn(student, own=True).own_prefix  # their own file: nothing asked of the worker
    assert worker["calls"] == []
    assert turn("4").own_prefix  # three others sent it, though each restored their own file


def test_the_tools_inside_the_public_prefix_are_primed_with_the_system_text(worker: dict[str, Any]) -> None:
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 900}} for i in range(4)]
    system = "s" * (2 * BLOCK_CHARS + 10)
    for student in "1234":
        last = turn(student, system=system, tools=tools)
    assert last.own_prefix
    (_, template), _, _ = worker["calls"]
    assert template["messages"] == [{"role": "system", "content": system}]  # the whole system text
    public_chars = len(shared_prefix.ConstantPrefix("system", system, tuple(tools)).text) // BLOCK_CHARS * BLOCK_CHARS
    primed = len(template["tools"])
    assert 0 < primed < 4 and template["tools"] == tools[:primed]  # whole tools, in order, none past the blocks
    assert len(shared_prefix.ConstantPrefix("system", system, tuple(tools[:primed])).text) <= public_chars
    assert len(shared_prefix.ConstantPrefix("system", system, tuple(tools[:primed + 1])).text) > public_chars
