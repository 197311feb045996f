"""Lane workers in the live line, on both back ends (in-process, and Redis when REDIS_URL is set):
hand-made timelines of an ordinary worker of one slot and a lane worker of one slot, ranked by the
scheduler's own rank_workers over the live load, claimed by the real pump. One or two event loops
on threads stand for one or two gateway processes."""
from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import replace

import pytest
from django.conf import settings
from django.test import override_settings

from fleet.scheduler import WorkerView
from inference.admission import line as admission
from inference.admission.line import Want
from tests.inference.admission.fake_fleet import install

BACKENDS = ["in-process"] + (["redis"] if settings.REDIS_URL else [])
LONG, SHORT = 8000, 200  # request bytes: an agent's turn (about 2,000 tokens), a question (about 50)


def two_workers(kind: str, monkeypatch: pytest.MonkeyPatch, *,
                lane_slots: int = 1) -> tuple[str, WorkerView, WorkerView]:
    model = f"m-{uuid.uuid4().hex[:6]}"
    ordinary = WorkerView(id=881, name="w881", base_url="http://127.0.0.1:9", pool_id=1, pool_name="production",
                          model_id=model, slots=1, state="healthy")
    lane = replace(ordinary, id=882, name="lane882", lane_tokens=1024, slots=lane_slots)
    install(monkeypatch, kind, [ordinary, lane], model)
    return model, ordinary, lane


@pytest.fixture(autouse=True)
def _fresh_lines() -> None:
    admission._lines.clear()
    admission._policy_cache = None


def want(model: str, student: int, prompt_bytes: int) -> Want:
    return Want(user_id=student, pool_id=1, model_id=model, prompt_bytes=prompt_bytes)


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_question_takes_the_lane_while_an_agent_ahead_of_it_waits_for_an_ordinary_slot(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent A holds the ordinary slot; agent B queues first (the head of the line: round-robin
    keeps arrival order between students served alike); a question arrives after it. The lane's
    free slot goes to the question at once, never to B, and B gets the ordinary slot when A's frees."""
    model, ordinary, lane = two_workers(kind, monkeypatch)

    async def scenario() -> list[tuple[str, str]]:
        served: list[tuple[str, str]] = []
        held = await admission.acquire_slot(want(model, 1, LONG))
        assert held.worker.name == ordinary.name  # a long prompt never takes the lane, even idle

        async def queued(name: str, wish: Want) -> None:
            slot = await admission.acquire_slot(wish)
            served.append((name, slot.worker.name))
            await asyncio.sleep(0.1)
            await slot.release()

        agent = asyncio.ensure_future(queued("agent B", want(model, 2, LONG)))
        await asyncio.sleep(0.3)
        assert served == []  # the lane is free, but not for B
        question = asyncio.ensure_future(queued("question", want(model, 3, SHORT)))
        await asyncio.wait_for(question, timeout=5)
        assert served == [("question", lane.name)] and not agent.done()
        await held.release()
        await asyncio.wait_for(agent, timeout=5)
        return served

    with override_settings(OCS={**settings.OCS, "QUEUE_MAX_WAIT_S": 30.0, "FAIR_POLICY": "requests"}):
        assert asyncio.run(scenario()) == [("question", lane.name), ("agent B", ordinary.name)]


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_question_behind_another_processs_waiting_agent_still_takes_the_lane(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two gateway processes: B's agent waits at the head of the shared line in process 1; a
    question in process 2 takes the free lane slot (only a short prompt could) instead of waiting
    for the agent's ordinary slot."""
    model, ordinary, lane = two_workers(kind, monkeypatch)
    served: list[tuple[str, str]] = []
    agent_queued, done = threading.Event(), threading.Event()

    async def process_one() -> None:
        held = await admission.acquire_slot(want(model, 1, LONG))
        waiting = asyncio.ensure_future(admission.acquire_slot(want(model, 2, LONG)))
        await asyncio.sleep(0.3)
        agent_queued.set()
        await asyncio.get_running_loop().run_in_executor(None, done.wait, 10)
        await held.release()
        slot = await asyncio.wait_for(waiting, timeout=5)
        served.append(("agent B", slot.worker.name))
        await slot.release()

    async def process_two() -> None:
        await asyncio.get_running_loop().run_in_executor(None, agent_queued.wait, 10)
        slot = await asyncio.wait_for(admission.acquire_slot(want(model, 3, SHORT)), timeout=5)
        served.append(("question", slot.worker.name))
        await slot.release()
        done.set()

    with override_settings(OCS={**settings.OCS, "QUEUE_MAX_WAIT_S": 30.0, "FAIR_POLICY": "requests"}):
        threads = [threading.Thread(target=asyncio.run, args=(p(),)) for p in (process_one, process_two)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert served == [("question", lane.name), ("agent B", ordinary.name)]


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_student_looping_short_requests_holds_half_the_lane_and_a_classmates_question_gets_the_rest(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane of two slots: a burst student's three short requests at once take one lane slot,
    the ordinary slot, and wait (the lane's other slot is not theirs to take); a classmate's
    question then takes it at once, past the burst student's waiting request."""
    model, ordinary, lane = two_workers(kind, monkeypatch, lane_slots=2)

    async def scenario() -> list[tuple[str, str]]:
        served: list[tuple[str, str]] = []
        held = []

        async def queued(name: str, wish: Want) -> None:
            slot = await admission.acquire_slot(wish)
            served.append((name, slot.worker.name))
            held.append(slot)

        burst = [asyncio.ensure_future(queued(f"burst {n}", want(model, 1, SHORT))) for n in range(3)]
        await asyncio.sleep(0.3)
        assert sorted(worker for _, worker in served) == [lane.name, ordinary.name]  # which one waits: any
        waiting = [b for b in burst if not b.done()]
        question = asyncio.ensure_future(queued("question", want(model, 2, SHORT)))
        await asyncio.wait_for(question, timeout=5)
        assert served[-1] == ("question", lane.name) and len(waiting) == 1 and not waiting[0].done()
        for slot in list(held):
            await slot.release()
        await asyncio.wait_for(waiting[0], timeout=5)
        for slot in held:
            await slot.release()
        return served

    with override_settings(OCS={**settings.OCS, "QUEUE_MAX_WAIT_S": 30.0, "FAIR_POLICY": "requests"}):
        asyncio.run(scenario())
