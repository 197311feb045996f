"""What the worker is told about its slot's cache, and which cache counts a student gets back."""
from __future__ import annotations

import json

from fleet.scheduler import WorkerView
from core.lease import Lease
from inference.admission.line import Slot
from inference.dispatch import for_slot
from inference.protocols import anthropic
from inference.protocols.base import Target

WORKER = WorkerView(id=7, name="w7", base_url="http://127.0.0.1:9", pool_id=1, pool_name="production",
                    model_id="m", slots=2, state="healthy")


def slot(index: int | None, own: bool) -> Slot:
    return Slot(worker=WORKER, lease=Lease("worker:7", "x"), reason="test", index=index, own_prefix=own)


def test_a_request_is_pinned_to_its_slot_and_reuses_only_its_own_students_cache() -> None:
    body = {"model": "m", "messages": []}
    assert for_slot("/v1/chat/completions", body, slot(1, own=True)) == {**body, "id_slot": 1, "cache_prompt": True}
    assert for_slot("/v1/completions", body, slot(0, own=False)) == {**body, "id_slot": 0, "cache_prompt": False}
    assert body == {"model": "m", "messages": []}  # the plan's body is not changed for the next try


def test_the_anthropic_dialect_goes_to_the_chat_route_which_can_be_pinned() -> None:
    call = anthropic.parse(json.dumps({"model": "m", "max_tokens": 5, "stream": True,
                                       "messages": [{"role": "user", "content": "guess"}]}).encode())
    plan = anthropic.plan(call, Target(max_tokens=5))
    assert for_slot(plan.path, plan.body, slot(1, own=False))["cache_prompt"] is False
    # the native /v1/messages ignores both (checked on the pinned build): it is never pinned
    assert for_slot("/v1/messages", plan.body, slot(1, own=False)) == plan.body
