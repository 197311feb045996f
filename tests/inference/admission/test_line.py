"""The admission queue's pump, driven directly with the slot claim replaced at its seam."""
from __future__ import annotations

import asyncio

import pytest

from inference.admission import line as admission
from inference.admission.line import Want


class FakeSlot:
    pass


def test_the_pump_survives_a_failing_claim_and_serves_the_waiter(monkeypatch) -> None:  # noqa: ANN001
    """No request arrives after the failure: only a pump that lives on can serve the waiter
    (a dead pump left it to time out, as seen in the demo after a worker was killed)."""
    outcomes = iter([None, RuntimeError("database is locked"), FakeSlot()])
    calls = []

    async def claim(want: Want, **_: object):  # noqa: ANN202
        calls.append(want.user_id)
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(admission, "try_claim", claim)
    monkeypatch.setattr(admission, "_publish_queue_depths", lambda: asyncio.sleep(0))

    async def scenario() -> object:
        return await asyncio.wait_for(admission.acquire_slot(Want(user_id=1, pool_id=1, model_id="m")), timeout=5)

    assert isinstance(asyncio.run(scenario()), FakeSlot)
    assert len(calls) == 3  # the fast path found none, the pump's first claim failed, its next one served


@pytest.fixture(autouse=True)
def _fresh_lines() -> None:
    admission._lines.clear()


def test_a_waiter_restarts_a_pump_that_is_gone(monkeypatch) -> None:  # noqa: ANN001
    state = {"free": False}

    async def claim(want: Want, **_: object):  # noqa: ANN202
        return FakeSlot() if state["free"] else None

    monkeypatch.setattr(admission, "try_claim", claim)
    monkeypatch.setattr(admission, "_publish_queue_depths", lambda: asyncio.sleep(0))

    async def scenario() -> object:
        waiting = asyncio.ensure_future(admission.acquire_slot(Want(user_id=1, pool_id=1, model_id="m")))
        await asyncio.sleep(0.1)
        (line,) = admission._lines.values()
        line.pump.cancel()  # whatever ended it, no pump serves the queue now
        await asyncio.sleep(0.05)
        state["free"] = True  # a slot frees up, and nobody new arrives
        return await asyncio.wait_for(waiting, timeout=5)

    assert isinstance(asyncio.run(scenario()), FakeSlot)


def test_a_waiter_holding_for_its_worker_lets_the_next_in_line_have_the_free_slot(monkeypatch) -> None:  # noqa: ANN001
    """Alice's long prompt waits for her conversation's worker (affinity_hold); the slot that is
    free elsewhere goes to bob, who is behind her in the line, instead of standing idle."""
    state = {"alice_may": False}
    served: list[int] = []

    async def claim(want: Want, **_: object):  # noqa: ANN202
        if want.user_id == 1 and not state["alice_may"]:
            want.holding = True
            return None
        want.holding = False
        served.append(want.user_id)
        return FakeSlot()

    monkeypatch.setattr(admission, "try_claim", claim)
    monkeypatch.setattr(admission, "_publish_queue_depths", lambda: asyncio.sleep(0))

    async def scenario() -> tuple[object, object]:
        alice = asyncio.ensure_future(admission.acquire_slot(Want(user_id=1, pool_id=1, model_id="m", prompt_bytes=10)))
        await asyncio.sleep(0.05)
        bob = await asyncio.wait_for(admission.acquire_slot(Want(user_id=2, pool_id=1, model_id="m",
                                                                 prompt_bytes=99_999)), timeout=5)
        assert not alice.done()  # still holding for her worker
        state["alice_may"] = True
        return bob, await asyncio.wait_for(alice, timeout=5)

    bob, alice = asyncio.run(scenario())
    assert isinstance(bob, FakeSlot) and isinstance(alice, FakeSlot)
    assert served == [2, 1]
