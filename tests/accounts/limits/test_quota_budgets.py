"""Weekly and term token budgets in live state (issue 21, item 2), on the in-process backend and
on Redis when REDIS_URL is set: checked and charged in the same atomic step as the day's."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from accounts.limits.quota import QuotaAsk, QuotaScope
from tests.core.test_live import BACKENDS, make_backends

WEEK, TERM = "W2026-11-30", "T2026-09-01"


def ask(day: str, reserve: int, *, term: str = "") -> QuotaAsk:
    return QuotaAsk(uuid.uuid4().hex, reserve, day, 30, week=WEEK, term=term)


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_weekly_budget_spans_the_days_of_the_week_and_settles_to_real_use(kind: str) -> None:
    (live,) = make_backends(kind)
    scope = QuotaScope(f"user:{uuid.uuid4().hex[:6]}", None, 600, None, tokens_per_week=1000)

    async def scenario() -> None:
        for day in ("2026-11-30", "2026-12-01"):  # Monday, Tuesday: each well under the day's 600
            assert (await live.admit([scope], ask(day, 400))).admitted
        refused = await live.admit([scope], ask("2026-12-02", 400))
        assert not refused.admitted and refused.refused_by == "tokens_per_week" and refused.tokens_used == 800
        await live.settle([scope.name], "2026-12-01", -300, periods=(WEEK,))  # Tuesday's used 100 of 400
        assert live.tokens_used_sync(scope.name, WEEK) == 500
        assert live.tokens_used_sync(scope.name, "2026-12-01") == 100
        assert (await live.admit([scope], ask("2026-12-02", 400))).admitted
        assert live.tokens_used_sync(scope.name, WEEK) == 900
        nextweek = QuotaAsk(uuid.uuid4().hex, 400, "2026-12-07", 30, week="W2026-12-07")
        assert (await live.admit([scope], nextweek)).admitted  # a new week, a new budget

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_term_budget_holds_only_with_a_term_and_racing_requests_never_overspend_it(kind: str) -> None:
    first, second = make_backends(kind, processes=2)
    scope = QuotaScope(f"user:{uuid.uuid4().hex[:6]}", None, None, None, tokens_per_term=1000)

    async def scenario() -> None:
        verdicts = await asyncio.gather(*((first if i % 2 else second).admit([scope], ask("2026-12-01", 300, term=TERM))
                                          for i in range(10)))
        assert sum(v.admitted for v in verdicts) == 3
        assert {v.refused_by for v in verdicts if not v.admitted} == {"tokens_per_term"}
        assert (await first.admit([scope], ask("2026-12-01", 300))).admitted  # outside a term: not counted

    asyncio.run(scenario())
