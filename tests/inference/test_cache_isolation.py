"""What the worker is told about its slot's cache, and which cache counts a student gets back."""
from __future__ import annotations

import json

from fleet.scheduler import WorkerView
from inference.admission import Lease, Slot
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


def test_the_native_messages_route_is_not_pinned_since_the_worker_ignores_it() -> None:
    body = {"model": "m", "messages": []}
    assert for_slot("/v1/messages", body, slot(1, own=False)) == body


def test_anthropic_cache_reads_are_folded_into_input_tokens() -> None:
    call = anthropic.parse(json.dumps({"model": "m", "max_tokens": 5, "stream": True,
                                       "messages": [{"role": "user", "content": "guess"}]}).encode())
    plan = anthropic.plan(call, Target(max_tokens=5))
    assert plan.convert is not None and plan.stream_transform is not None
    answer = plan.convert({"type": "message", "usage": {"input_tokens": 1, "cache_read_input_tokens": 90,
                                                        "output_tokens": 1}})
    assert answer["usage"] == {"input_tokens": 91, "cache_read_input_tokens": 0, "output_tokens": 1}
    start = ('event: message_start\ndata: {"type": "message_start", "message": {"id": "x", "usage": '
             '{"cache_read_input_tokens": 90, "input_tokens": 1, "output_tokens": 0}}}\n\n').encode()
    out = b"".join(plan.stream_transform().feed(start))
    data = json.loads(out.split(b"data: ", 1)[1])
    assert data["message"]["usage"] == {"cache_read_input_tokens": 0, "input_tokens": 91, "output_tokens": 0}
