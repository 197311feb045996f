"""Quota decisions in live state, on the in-process backend and (when REDIS_URL is set) on Redis:
both run the same check-then-charge step atomically, so the caps hold under concurrency and
across gateway processes."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from accounts.limits.quota import QuotaAsk, QuotaScope, concurrency_resource
from tests.core.test_live import BACKENDS, make_backends

DAY = "2026-11-29"


def ask(reserve: int = 10, lease_s: float = 30) -> QuotaAsk:
    return QuotaAsk(uuid.uuid4().hex, reserve, DAY, lease_s)


def scope(name: str = "user:1", rpm: int | None = None, tpd: int | None = None, conc: int | None = None) -> QuotaScope:
    return QuotaScope(name, rpm, tpd, conc)


@pytest.mark.parametrize("kind", BACKENDS)
def test_n_parallel_requests_against_a_rate_of_k_admit_exactly_k_across_processes(kind: str) -> None:
    first, second = make_backends(kind, processes=2)
    caps = [scope(rpm=7)]

    async def scenario() -> list[bool]:
        verdicts = await asyncio.gather(*(
            (first if i % 2 else second).admit(caps, ask()) for i in range(40)))
        return [v.admitted for v in verdicts]

    admitted = asyncio.run(scenario())
    assert admitted.count(True) == 7
    refused = asyncio.run(first.admit(caps, ask()))
    assert not refused.admitted and refused.refused_by == "requests_per_minute"
    assert refused.requests_used == 7 and 0 < refused.window_reset_ms <= 60_000


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_token_budget_is_never_overspent_by_racing_requests_and_settles_to_real_use(kind: str) -> None:
    first, second = make_backends(kind, processes=2)
    caps = [scope(tpd=1000)]

    async def scenario() -> None:
        verdicts = await asyncio.gather(*((first if i % 2 else second).admit(caps, ask(reserve=300))
                                          for i in range(12)))
        assert sum(v.admitted for v in verdicts) == 3  # 3 x 300 <= 1000 < 4 x 300
        refused = next(v for v in verdicts if not v.admitted)
        assert refused.refused_by == "tokens_per_day" and refused.tokens_used == 900
        await first.settle(["user:1"], DAY, -300 * 3 + 120)  # the three used 120 tokens in all
        assert first.tokens_used_sync("user:1", DAY) == 120
        assert (await second.admit(caps, ask(reserve=880))).admitted
        assert not (await second.admit(caps, ask(reserve=1))).admitted

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_concurrency_is_a_lease_freed_by_release_or_by_expiry(kind: str) -> None:
    (live,) = make_backends(kind)
    caps = [scope(conc=2)]

    async def scenario() -> None:
        held, short = ask(lease_s=30), ask(lease_s=0.1)
        assert (await live.admit(caps, held)).admitted and (await live.admit(caps, short)).admitted
        third = await live.admit(caps, ask())
        assert not third.admitted and third.refused_by == "concurrency"
        await live.release(concurrency_resource("user:1"), held.request_id)
        await asyncio.sleep(0.3)  # `short` was never renewed: its lease has run out
        assert (await live.admit(caps, ask())).admitted and (await live.admit(caps, ask())).admitted
        assert not (await live.admit(caps, ask())).admitted

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_every_scope_must_agree_and_a_refusal_charges_none_of_them(kind: str) -> None:
    (live,) = make_backends(kind)
    student, key = scope("user:1", rpm=5), scope("key:9", rpm=2)

    async def scenario() -> None:
        assert (await live.admit([student, key], ask())).admitted
        assert (await live.admit([student, key], ask())).admitted
        refused = await live.admit([student, key], ask())
        assert not refused.admitted and refused.scope_index == 1  # the key's own, tighter cap
        # The student's other keys still have the three requests the refusal did not take.
        other_key = [student, scope("key:10")]
        assert [(await live.admit(other_key, ask())).admitted for _ in range(4)] == [True, True, True, False]
        assert live.tokens_used_sync("key:9", DAY) == 20 and live.tokens_used_sync("user:1", DAY) == 50

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_no_caps_admits_everything_and_still_counts_tokens(kind: str) -> None:
    (live,) = make_backends(kind)

    async def scenario() -> None:
        for _ in range(5):
            assert (await live.admit([scope()], ask(reserve=1000))).admitted
        assert live.tokens_used_sync("user:1", DAY) == 5000

    asyncio.run(scenario())


def test_the_request_window_slides_from_its_oldest_end() -> None:
    """The in-process window drops only what left it and reports when its oldest entry leaves."""
    from collections import OrderedDict

    from accounts.limits.quota import decide_in_memory

    windows: dict[str, OrderedDict[str, int]] = {}
    leases: dict[str, dict[str, float]] = {}
    tokens: dict[tuple[str, str], int] = {}

    def at(seconds: float):  # noqa: ANN202
        return decide_in_memory(scopes=[scope(rpm=3)], ask=ask(), now_ms=int(seconds * 1000),
                                windows=windows, leases=leases, tokens=tokens)

    assert all(at(t).admitted for t in (0, 20, 40))
    refused = at(50)
    assert not refused.admitted and refused.window_reset_ms == 10_000  # the request at 0 s leaves at 60 s
    admitted = at(61)  # the first request has left: one place
    assert admitted.admitted and admitted.requests_used == 3
    assert list(windows["user:1"].values()) == [20_000, 40_000, 61_000]
    assert not at(62).admitted and at(81).admitted  # the one at 20 s left at 80 s
