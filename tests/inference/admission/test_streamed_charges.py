"""A process's streamed charges, gathered and sent together (inference/admission/streamed.py), on
the in-process back end and (when REDIS_URL is set) on Redis: one round trip for every stream's
charges of FLUSH_S, and a student's counter ends at their real cost whether the request ends
before its charge went out, while it is on its way, after it, or with the live state away."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.live import LiveStateUnavailable
from inference.admission import line, streamed
from inference.admission.line import Want, fair_settlement
from inference.admission.live import FairCharge
from inference.admission.rules import charge
from tests.core.test_live import BACKENDS, make_backends
from tests.inference.admission.test_live import _fair_counter

POLICY = "tokens"


@pytest.fixture
def live(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:  # noqa: ANN401
    (backend,) = make_backends(request.param)
    calls: list[list[FairCharge]] = []
    real = backend.fair_charges

    async def counted(charges: list[FairCharge]) -> None:
        calls.append(list(charges))
        await real(charges)

    backend.fair_charges = counted
    backend.calls = calls
    monkeypatch.setattr(streamed, "admission_live", lambda: backend)
    monkeypatch.setattr(line, "active_policy", _policy)
    return backend


async def _policy() -> str:
    return POLICY


def _counter(live: Any, student: str) -> float:  # noqa: ANN401
    try:
        return _fair_counter(live, POLICY, "1:m", student)
    except KeyError:  # in process: no counter yet
        return 0.0


def _want(student: int) -> Want:
    return Want(user_id=student, pool_id=1, model_id="m")


@pytest.mark.parametrize("live", BACKENDS, indirect=True)
def test_every_streams_charges_of_a_moment_go_in_one_round_trip(live: Any) -> None:  # noqa: ANN401
    async def scenario() -> tuple[list[float], list[float], list[float]]:
        first, second, other = _want(1), _want(1), _want(2)
        for want, tokens in ((first, 33), (second, 33), (other, 33), (first, 33)):
            await line.charge_streamed(want, output_tokens=tokens)
        before = [_counter(live, s) for s in ("1", "2")]
        await asyncio.sleep(streamed.FLUSH_S * 3)
        after = [_counter(live, s) for s in ("1", "2")]
        return before, after, [w.fair_charged for w in (first, second, other)]

    before, after, charged = asyncio.run(scenario())
    per = charge(POLICY, computed_prompt_tokens=0, output_tokens=33)
    assert before == [0.0, 0.0]  # nothing sent at once: no stream waits for the live state
    assert len(live.calls) == 1 and len(live.calls[0]) == 3  # one round trip; one charge per request
    assert after == pytest.approx([3 * per, per])
    assert charged == pytest.approx([2 * per, per, per])  # each request knows what was taken for it


@pytest.mark.parametrize("live", BACKENDS, indirect=True)
@pytest.mark.parametrize("ends", ["before it is sent", "while it is on its way", "after it was taken",
                                  "with the live state away"])
def test_a_students_counter_ends_at_the_real_cost_however_the_end_falls(live: Any, ends: str,  # noqa: ANN401
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real = live.fair_charges

    async def slow(charges: list[FairCharge]) -> None:
        await asyncio.sleep(0.2)
        await real(charges)

    async def away(charges: list[FairCharge]) -> None:
        raise LiveStateUnavailable("Redis at test is unavailable")

    if ends == "while it is on its way":
        live.fair_charges = slow
    elif ends == "with the live state away":
        live.fair_charges = away

    async def scenario() -> float:
        want = _want(7)
        await line.charge_streamed(want, output_tokens=33)
        if ends == "while it is on its way":
            await asyncio.sleep(streamed.FLUSH_S + 0.05)  # flushed, not answered yet
        elif ends != "before it is sent":
            await asyncio.sleep(streamed.FLUSH_S * 3)
        # the request's end: 64 tokens out, 10 of the prompt computed
        settlement = await fair_settlement(want, computed_prompt_tokens=10, output_tokens=64)
        await live.finish(settlement)
        await asyncio.sleep(streamed.FLUSH_S * 3)  # anything left over would land by now
        return _counter(live, "7")

    assert asyncio.run(scenario()) == pytest.approx(charge(POLICY, computed_prompt_tokens=10, output_tokens=64))


@pytest.mark.parametrize("live", BACKENDS, indirect=True)
def test_an_end_waits_for_every_flush_carrying_its_charges_whichever_is_answered_first(live: Any) -> None:  # noqa: ANN401
    real = live.fair_charges
    delays = [0.5, 0.05]  # the first flush is answered after the second

    async def uneven(charges: list[FairCharge]) -> None:
        await asyncio.sleep(delays.pop(0) if delays else 0)
        await real(charges)

    live.fair_charges = uneven

    async def scenario() -> float:
        want = _want(9)
        await line.charge_streamed(want, output_tokens=33)
        await asyncio.sleep(streamed.FLUSH_S + 0.05)  # the first flush is on its way
        await line.charge_streamed(want, output_tokens=33)
        await asyncio.sleep(streamed.FLUSH_S + 0.05)  # and the second
        settlement = await fair_settlement(want, computed_prompt_tokens=0, output_tokens=80)
        await live.finish(settlement)
        await asyncio.sleep(0.6)
        return _counter(live, "9")

    assert asyncio.run(scenario()) == pytest.approx(charge(POLICY, computed_prompt_tokens=0, output_tokens=80))


@pytest.mark.parametrize("live", ["in-process"], indirect=True)
def test_a_policy_change_mid_answer_sends_what_was_charged_under_the_old_one(live: Any) -> None:  # noqa: ANN401
    async def scenario() -> Want:
        want = _want(3)
        charges = streamed.streamed_charges()
        charges.add(want, "tokens", 5.0)
        charges.add(want, "local", 4.0)
        await asyncio.sleep(streamed.FLUSH_S * 3)
        return want

    want = asyncio.run(scenario())
    assert [[(c.policy, c.amount) for c in call] for call in live.calls] == [[("tokens", 5.0)], [("local", 4.0)]]
    assert (want.fair_policy, want.fair_charged) == ("local", 9.0)
