"""First come, first served on the way to a worker (inference/admission/first_come.py): a few
requests at a time in their admission and first claim, the others in order of arrival; one that
gives up leaves the line without taking a place with it."""
from __future__ import annotations

import asyncio
import json

import pytest
from django.conf import settings

from inference.admission.first_come import FirstCome
from tests.api_client import ApiClient
from tests.conftest import MODEL_ID


def test_a_burst_goes_through_in_order_of_arrival_a_few_at_a_time() -> None:
    async def burst() -> tuple[list[int], int]:
        gate, entered, inside, most = FirstCome(2), [], [0], [0]

        async def request(number: int) -> None:
            async with gate:
                entered.append(number)
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                await asyncio.sleep(0.002 * (3 - number % 3))  # round trips of different lengths
                inside[0] -= 1

        await asyncio.gather(*(request(number) for number in range(12)))
        assert gate.held == 0 and not gate.waiting
        return entered, most[0]

    entered, most = asyncio.run(burst())
    assert entered == list(range(12))
    assert most == 2


def test_one_that_gives_up_while_waiting_leaves_the_line_and_the_next_comes_in() -> None:
    async def scenario() -> list[str]:
        gate, entered, release = FirstCome(1), [], asyncio.Event()

        async def request(name: str) -> None:
            async with gate:
                entered.append(name)
                await release.wait()

        first = asyncio.ensure_future(request("first"))
        await asyncio.sleep(0)
        gone = asyncio.ensure_future(request("closes the tab"))
        third = asyncio.ensure_future(request("third"))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, third)
        assert gate.held == 0 and not gate.waiting
        return entered

    assert asyncio.run(scenario()) == ["first", "third"]


def test_one_handed_its_turn_as_it_gives_up_passes_the_turn_on() -> None:
    async def scenario() -> list[str]:
        gate, entered = FirstCome(1), []

        async def request(name: str) -> None:
            async with gate:
                entered.append(name)
                await asyncio.sleep(0)

        await gate.__aenter__()  # a holder
        handed = asyncio.ensure_future(request("handed"))
        third = asyncio.ensure_future(request("third"))
        await asyncio.sleep(0)
        await gate.__aexit__(None, None, None)  # the holder leaves: `handed` has the turn...
        handed.cancel()  # ...and gives up before it runs
        await asyncio.gather(handed, third, return_exceptions=True)
        assert gate.held == 0 and not gate.waiting
        return entered

    assert asyncio.run(scenario()) == ["third"]


def test_no_bound_lets_everyone_in_at_once() -> None:
    async def scenario() -> int:
        gate, inside, most = FirstCome(0), [0], [0]

        async def request() -> None:
            async with gate:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                await asyncio.sleep(0.001)
                inside[0] -= 1

        await asyncio.gather(*(request() for _ in range(5)))
        return most[0]

    assert asyncio.run(scenario()) == 5


@pytest.mark.integration
@pytest.mark.parametrize("at_once", [1, 0])
def test_a_students_requests_at_once_are_admitted_one_after_another_when_bounded(
        worker, student_key, monkeypatch, at_once: int) -> None:  # noqa: ANN001
    """Through the real pipeline to the real worker, the admission slowed down as a busy Redis
    would: bounded to 1, the requests' admissions never overlap; unbounded, they do."""
    import inference.pipeline as pipeline

    _, raw = student_key
    monkeypatch.setitem(settings.OCS, "ADMISSION_AT_ONCE", at_once)
    original, inside, most = pipeline.admit, [0], [0]

    async def slow_admit(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        try:
            await asyncio.sleep(0.02)
            return await original(*args, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(pipeline, "admit", slow_admit)

    async def ask() -> int:
        response = await ApiClient().apost("/v1/chat/completions", json.dumps({
            "model": MODEL_ID, "max_tokens": 2, "messages": [{"role": "user", "content": "Say ok"}]}),
            content_type="application/json", headers={"Authorization": f"Bearer {raw}"})
        return response.status_code

    async def burst() -> list[int]:
        return list(await asyncio.gather(*(ask() for _ in range(3))))

    assert asyncio.run(burst()) == [200, 200, 200]
    assert most[0] == (1 if at_once == 1 else 3)
