"""One waiting line for every gateway process: two event loops on two threads stand for two
gateway processes sharing live state (on Redis when REDIS_URL is set: the PostgreSQL + Redis
suite), each with its own admission pump, claiming real slot leases of one one-slot worker."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from core.live import worker_resource
from fleet.scheduler import Candidate, Decision, WorkerView
from inference.admission import line as admission
from inference.admission.line import Want
from ocsweb.live import SiteInProcessLiveState, SiteRedisLiveState

BACKENDS = ["in-process"] + (["redis"] if settings.REDIS_URL else [])
WORKER = WorkerView(id=991, name="w991", base_url="http://127.0.0.1:9", pool_id=1, pool_name="production",
                    model_id="m", slots=1, state="healthy")


def one_worker_line(kind: str, monkeypatch: pytest.MonkeyPatch, *,
                    slots: int) -> tuple[SiteInProcessLiveState | SiteRedisLiveState, str]:
    """Live state of `kind` for admission and its leases, and a new model served by one worker of
    `slots` slots, ranked by the live load (the scheduler's ranking replaced at its seam)."""
    live = (SiteInProcessLiveState() if kind == "in-process"
            else SiteRedisLiveState(settings.REDIS_URL, f"{settings.OCS_LIVE_NAMESPACE}-{uuid.uuid4().hex[:8]}"))
    monkeypatch.setattr(admission, "admission_live", lambda: live)
    monkeypatch.setattr("core.lease.live_state", lambda: live)
    model = f"m-{uuid.uuid4().hex[:6]}"
    worker = WorkerView(**{**WORKER.__dict__, "model_id": model, "slots": slots})

    async def rank(want: Want, *, fair: tuple[str, str] | None = None) -> tuple[Decision, str | None]:
        busy = (await live.busy([worker_resource(worker.id)]))[worker_resource(worker.id)]
        turn = await live.fair_turn(*fair) if fair else None
        return Decision(ranked=[Candidate(worker=worker, busy=busy, reason="test")]), turn

    monkeypatch.setattr(admission, "rank", rank)
    monkeypatch.setattr(admission, "_publish_queue_depths", lambda: asyncio.sleep(0))
    return live, model


@pytest.fixture(autouse=True)
def _fresh_lines() -> None:
    admission._lines.clear()
    admission._policy_cache = None


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_classmate_waiting_in_another_process_is_served_in_the_shared_order(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    live, model = one_worker_line(kind, monkeypatch, slots=1)
    served: list[str] = []
    lock = threading.Lock()

    async def one(student: int, name: str, prompt_bytes: int, hold_s: float) -> None:
        want = Want(user_id=student, pool_id=1, model_id=model, prompt_bytes=prompt_bytes)
        slot = await admission.acquire_slot(want)
        with lock:
            served.append(name)
        await asyncio.sleep(hold_s)
        await slot.release()
        await live.finish(await admission.fair_settlement(want, computed_prompt_tokens=prompt_bytes // 4,
                                                          output_tokens=10))

    async def burst_process() -> None:  # gateway process A: one student's backlog of agent turns
        await asyncio.gather(*(one(1, f"burst{n}", 8000, 0.3) for n in range(8)))

    arrivals: list[int] = []

    async def chat_process() -> None:  # gateway process B: a classmate's short questions, one at a time
        await asyncio.sleep(0.5)
        for n in range(3):
            with lock:
                arrivals.append(len(served))
            await one(2, f"chat{n}", 200, 0.02)

    with override_settings(OCS={**settings.OCS, "QUEUE_MAX_WAIT_S": 30.0, "FAIR_POLICY": "tokens"}):
        threads = [threading.Thread(target=asyncio.run, args=(process(),)) for process in (burst_process, chat_process)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert time.monotonic() - started < 30 and len(served) == 11, served
    # Each question got the slot after at most the burst turn running when it came and one more
    # (the race of its arrival with a release): it did not wait behind the other process's backlog.
    for n, arrived_at in enumerate(arrivals):
        assert served.index(f"chat{n}") - arrived_at <= 1, (served, arrivals)
    assert served.index("chat2") < 8, served  # all three before the burst's backlog ran out


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_policy_switch_reaches_the_gateway_within_a_second_and_unknown_names_are_refused(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    live = (SiteInProcessLiveState() if kind == "in-process"
            else SiteRedisLiveState(settings.REDIS_URL, f"{settings.OCS_LIVE_NAMESPACE}-{uuid.uuid4().hex[:8]}"))
    monkeypatch.setattr(admission, "admission_live", lambda: live)

    def a_second_later() -> None:
        assert admission._policy_cache is not None
        admission._policy_cache = (admission._policy_cache[0], time.monotonic() - admission.POLICY_REFRESH_S)

    with override_settings(OCS={**settings.OCS, "FAIR_POLICY": "tokens"}):
        assert asyncio.run(admission.active_policy()) == "tokens"
        live.set_fair_policy("requests")  # as a management command (class_replay --policy) does
        admission._policy_cache = ("tokens", time.monotonic() + 3600)  # just read
        assert asyncio.run(admission.active_policy()) == "tokens"  # read at most once a second
        a_second_later()
        assert asyncio.run(admission.active_policy()) == "requests"
        live.set_fair_policy(None)
        a_second_later()
        assert asyncio.run(admission.active_policy()) == "tokens"  # back to OCS_FAIR_POLICY
    with pytest.raises(ValueError):
        live.set_fair_policy("fifo")


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_student_holding_half_the_slots_lets_a_waiting_classmate_have_the_next_one(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hog holds 2 of a worker's 4 slots and queues one more, older and cheaper than a
    classmate's question (so first in the fair order). The slot that frees goes to the classmate
    (rules.over_share); once nobody else waits, the hog may take a third."""
    _live, model = one_worker_line(kind, monkeypatch, slots=4)
    hog, classmate, bystander = 1, 2, 3

    def want(student: int, prompt_bytes: int) -> Want:
        return Want(user_id=student, pool_id=1, model_id=model, prompt_bytes=prompt_bytes)

    async def scenario() -> list[str]:
        held = [await admission.acquire_slot(want(hog, 4000)) for _ in range(2)]
        others = [await admission.acquire_slot(want(bystander, 4000)) for _ in range(2)]
        served: list[str] = []

        async def queued(name: str, wish: Want) -> None:
            slot = await admission.acquire_slot(wish)
            served.append(name)
            held.append(slot)

        hog_more = asyncio.ensure_future(queued("hog's third", want(hog, 80)))
        await asyncio.sleep(0.2)
        question = asyncio.ensure_future(queued("question", want(classmate, 400)))
        await asyncio.sleep(0.2)
        assert served == []  # the worker is full
        await others.pop().release()
        await asyncio.wait_for(question, timeout=10)
        await others.pop().release()
        await asyncio.wait_for(hog_more, timeout=10)
        for slot in held:
            await slot.release()
        return served

    with override_settings(OCS={**settings.OCS, "QUEUE_MAX_WAIT_S": 30.0, "FAIR_POLICY": "tokens"}):
        assert asyncio.run(scenario()) == ["question", "hog's third"]
