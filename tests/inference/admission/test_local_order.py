"""The "local" fair policy (fair_share.order_local): a freed slot goes to a waiter whose
conversation is on that worker, ahead of a more-owed classmate, only while that waiter's student
is within the bound of the most-owed one. Hand-made timelines on the pure rule, on both back ends'
fair_order (in-process, and Redis when REDIS_URL is set), and through the real pump of the live
line with two workers of one slot each."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from fleet.scheduler import WorkerView
from inference.admission import line as admission
from inference.admission.fair_share import Waiting, charge, order, order_local
from inference.admission.line import Want
from tests.inference.admission.fake_fleet import install, live_state

BACKENDS = ["in-process"] + (["redis"] if settings.REDIS_URL else [])
A, B = 501, 502  # two workers


def waiting(request: str, student: str, worker: int | None, arrived: float = 0.0, cost: float = 100.0) -> Waiting:
    return Waiting(request=request, student=student, arrived=arrived, cost=cost, worker=worker)


LINE = [waiting("ann-1", "ann", B, 0.0), waiting("bob-1", "bob", A, 1.0), waiting("cat-1", "cat", A, 2.0),
        waiting("dan-1", "dan", None, 3.0)]
COUNTERS = {"ann": 1000.0, "bob": 1500.0, "cat": 9000.0, "dan": 1200.0}


def requests(ranked: list[Waiting]) -> list[str]:
    return [w.request for w in ranked]


def test_a_freed_slot_goes_to_the_waiter_whose_conversation_is_there_within_the_bound() -> None:
    today = requests(order(LINE, COUNTERS))
    assert today == ["ann-1", "dan-1", "bob-1", "cat-1"]
    # A frees: bob's conversation is there and bob is 500 above ann, within 1,000: bob first. Cat's
    # is there too, but cat is 8,000 above ann: cat keeps today's place.
    assert requests(order_local(LINE, COUNTERS, free_workers=[A], bound=1000)) == ["bob-1", "ann-1", "dan-1", "cat-1"]
    # B frees: ann is both the most owed and local.
    assert requests(order_local(LINE, COUNTERS, free_workers=[B], bound=1000)) == today
    # Beyond the bound nobody passes ann: bob at 1,500 is 500 above her, over a bound of 400.
    assert requests(order_local(LINE, COUNTERS, free_workers=[A], bound=400)) == today


def test_with_no_locality_or_a_bound_of_zero_it_is_todays_order() -> None:
    today = requests(order(LINE, COUNTERS))
    assert requests(order_local(LINE, COUNTERS, free_workers=[], bound=10**9)) == today
    assert requests(order_local(LINE, COUNTERS, free_workers=[999], bound=10**9)) == today
    # bound 0: only a local waiter level with the most owed goes first
    assert requests(order_local(LINE, COUNTERS, free_workers=[A], bound=0)) == today
    level = {**COUNTERS, "bob": 1000.0}
    assert requests(order_local(LINE, level, free_workers=[A], bound=0))[0] == "bob-1"
    assert order_local([], {}, free_workers=[A]) == []


def test_a_student_owed_service_is_never_passed_over_beyond_the_bound() -> None:
    """Worker A frees again and again; bob's and cat's conversations are there, ann's is on B,
    which stays busy. Each pass adds the passer's charge: every passer was within the bound of
    ann when it passed, and ann is served by A once both are beyond it."""
    bound = 2500.0
    counters = {"ann": 0.0, "bob": 0.0, "cat": 600.0}
    line = {"ann": waiting("ann", "ann", B), "bob": waiting("bob", "bob", A), "cat": waiting("cat", "cat", A)}
    served = []
    for turn in range(20):
        head = order_local(line.values(), counters, free_workers=[A], bound=bound)[0]
        least = min(counters[w.student] for w in line.values())
        assert counters[head.student] <= least + bound  # the bound, at every pass
        served.append(head.student)
        if head.student == "ann":
            break
        counters[head.student] += charge("tokens", computed_prompt_tokens=400, output_tokens=100)  # 800 a turn
        line[head.student] = waiting(f"{head.student}-{turn}", head.student, A, arrived=float(turn))
    assert served[-1] == "ann", served
    # bob and cat took A while within 2,500 of ann: bob 4 times (0 .. 2,400), cat 3 (600 .. 2,200)
    assert served.count("bob") == 4 and served.count("cat") == 3, served


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_live_order_is_the_pure_rules_on_both_back_ends(kind: str) -> None:
    live, line = live_state(kind), f"1:m-{uuid.uuid4().hex[:6]}"

    async def scenario() -> list[list[str]]:
        for entry in LINE:
            await live.fair_join(line, "local", request=entry.request, student=entry.student, weight=1.0,
                                 cost=entry.cost, ttl_s=10**6, worker=entry.worker)
            await asyncio.sleep(0.002)  # arrival order, on the Redis clock (milliseconds) too
        for student, amount in COUNTERS.items():
            await live.fair_charge(line, "local", student=student, amount=amount)
        cases: list[tuple[float, list[int]]] = [(1000.0, [A]), (1000.0, [B]), (400.0, [A]), (10.0**9, [])]
        return [await live.fair_order(line, "local", 10, local=case) for case in cases] + [
            await live.fair_order(line, "local", 10)]

    orders = asyncio.run(scenario())
    assert orders == [requests(order_local(LINE, COUNTERS, free_workers=[A], bound=1000)),
                      requests(order_local(LINE, COUNTERS, free_workers=[B], bound=1000)),
                      requests(order_local(LINE, COUNTERS, free_workers=[A], bound=400)),
                      requests(order(LINE, COUNTERS)), requests(order(LINE, COUNTERS))]


def two_workers(kind: str, monkeypatch: pytest.MonkeyPatch, affinity: dict[str, int]) -> str:
    """Workers A and B of one slot, each conversation's worker from `affinity`."""
    model = f"m-{uuid.uuid4().hex[:6]}"
    workers = [WorkerView(id=number, name=f"w{number}", base_url="http://127.0.0.1:9", pool_id=1,
                          pool_name="production", model_id=model, slots=1, state="healthy") for number in (A, B)]
    install(monkeypatch, kind, workers, model, affinity=affinity)
    return model


@pytest.fixture(autouse=True)
def _fresh_lines() -> None:
    admission._lines.clear()
    admission._policy_cache = None


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize(("policy", "bob_ahead_by", "expected"), [
    ("tokens", 0.0, [("ann", "w501"), ("bob", "w502")]),  # today: the most owed takes whatever frees
    ("local", 0.0, [("bob", "w501"), ("ann", "w502")]),  # A frees: bob's conversation is there
    ("local", 5000.0, [("ann", "w501"), ("bob", "w502")]),  # bob beyond the bound: ann first, as today
])
def test_the_pump_gives_a_freed_slot_to_its_conversation_within_the_bound(
        kind: str, policy: str, bob_ahead_by: float, expected: list[tuple[str, str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two classmates hold A and B. Ann (conversation on B) queues first, bob (on A) after her.
    A frees first."""
    model = two_workers(kind, monkeypatch, {"x": A, "y": B, "ann": B, "bob": A})

    def wish(student: int, conversation: str) -> Want:
        return Want(user_id=student, pool_id=1, model_id=model, prompt_bytes=4000, conversation=conversation)

    async def scenario() -> list[tuple[str, str]]:
        served: list[tuple[str, str]] = []
        on_a, on_b = await admission.acquire_slot(wish(9, "x")), await admission.acquire_slot(wish(8, "y"))
        assert (on_a.worker.id, on_b.worker.id) == (A, B)
        if bob_ahead_by:
            await admission.admission_live().fair_charge(f"1:{model}", policy, student="2", amount=bob_ahead_by)

        async def queued(name: str, wanted: Want) -> None:
            slot = await admission.acquire_slot(wanted)
            served.append((name, slot.worker.name))

        ann = asyncio.ensure_future(queued("ann", wish(1, "ann")))
        await asyncio.sleep(0.15)
        bob = asyncio.ensure_future(queued("bob", wish(2, "bob")))
        await asyncio.sleep(0.15)
        assert served == []
        await on_a.release()
        await asyncio.sleep(0.3)
        await on_b.release()
        await asyncio.wait_for(asyncio.gather(ann, bob), timeout=5)
        return served

    with override_settings(OCS={**settings.OCS, "QUEUE_MAX_WAIT_S": 30.0, "FAIR_POLICY": policy,
                                "LOCAL_BOUND": 2000.0}):
        assert asyncio.run(scenario()) == expected
