"""The worker slot's rules in the live state (inference/admission/live.py): suspects and
affinity in the scheduler's view, the request path's folded steps with the end's one batch, and
the shared prefix's senders, on the in-process backend and (when REDIS_URL is set) on Redis."""
from __future__ import annotations

import asyncio

import pytest

from accounts.limits.live_quota import TokenSettlement
from core.live import Settlement
from inference.admission.live import FairCharge
from ocsweb.live import SiteInProcessLiveState, SiteRedisLiveState
from tests.core.test_live import BACKENDS, make_backends


@pytest.mark.parametrize("kind", BACKENDS)
def test_suspects_and_affinity_are_shared_and_expire(kind: str) -> None:
    first, second = make_backends(kind, processes=2)

    async def scenario() -> None:
        await first.mark_suspect(5, 30)
        await first.set_affinity("conv-a", 9, 30)
        await first.mark_suspect(6, 0.1)
        await first.set_affinity("conv-b", 9, 0.1)
        await asyncio.sleep(0.3)  # the short-lived entries are surely past; the long ones are not
        view = await second.view([5, 6, 9], "conv-a")
        assert view.suspects == frozenset({5}) and view.affinity_worker_id == 9
        assert (await second.view([5, 6, 9], "conv-b")).affinity_worker_id is None
        assert (await second.view([5], "conv-c")).affinity_worker_id is None

    asyncio.run(scenario())


def _fair_counter(live: SiteInProcessLiveState | SiteRedisLiveState, policy: str, line: str, student: str) -> float:
    if isinstance(live, SiteInProcessLiveState):
        return live._fair_counters[(policy, line)][student]
    return float(live._sync.hget(live._k("fair", "ctr", policy, line), student) or 0)


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_request_path_reads_and_writes_in_few_round_trips_with_the_same_meaning(kind: str) -> None:
    """The uncontended request's live-state steps, folded together: the load with whose turn it
    is, a claim that records the conversation's worker, and an end that frees and settles
    everything at once — each seen by another process as the separate steps were."""
    first, second = make_backends(kind, processes=2)

    async def scenario() -> None:
        assert (await first.view([3], None, fair_line="1:m", fair_policy="tokens")).fair_turn is None
        await second.fair_join("1:m", "tokens", request="r1", student="8", weight=1.0, cost=100.0, ttl_s=30)
        assert (await first.view([3], None, fair_line="1:m", fair_policy="tokens")).fair_turn == "r1"
        assert (await first.view([3], None)).fair_turn is None  # not asked, not read
        await second.fair_leave("1:m", "r1")

        claim = await first.claim_slot("worker:3", 2, 30, student="8", conversation="conv-z", affinity=(3, 30.0))
        assert claim is not None
        view = await second.view([3], "conv-z")
        assert view.busy == {3: 1} and view.affinity_worker_id == 3
        assert await first.claim_slot("worker:3", 2, 30, student="8", conversation="conv-y") is not None
        assert (await second.view([3], "conv-y")).affinity_worker_id is None  # no affinity asked

        concurrency = await first.claim("conc:user:8", 4, 30)
        assert concurrency is not None
        await first.settle(["user:8"], "2026-12-01", 500)
        await first.fair_charge("1:m", "tokens", student="8", amount=50.0)
        await first.finish(Settlement(leases=(("worker:3", claim.lease_id), ("conc:user:8", concurrency)),
                                      parts=(TokenSettlement(scopes=("user:8",), periods=("2026-12-01", "2026-W49"),
                                                             delta=-120),
                                             FairCharge(line="1:m", policy="tokens", student="8", amount=25.0))))
        assert (await second.busy(["worker:3", "conc:user:8"])) == {"worker:3": 1, "conc:user:8": 0}
        assert second.tokens_used_sync("user:8", "2026-12-01") == 380
        assert second.tokens_used_sync("user:8", "2026-W49") == -120
        assert _fair_counter(second, "tokens", "1:m", "8") == 75.0
        await first.finish(Settlement())  # nothing to do is fine

    asyncio.run(scenario())




@pytest.mark.parametrize("kind", BACKENDS)
def test_prefix_senders_count_distinct_students_across_processes_and_expire(kind: str) -> None:
    one, two = make_backends(kind, processes=2)

    async def scenario() -> None:
        assert await one.prefix_senders(["a", "b"], "1", 30) == [1, 1]
        assert await two.prefix_senders(["a", "b"], "1", 30) == [1, 1]  # the same student again
        assert await two.prefix_senders(["a", "b", "c"], "2", 30) == [2, 2, 1]
        assert await one.prefix_senders(["a"], "3", 30) == [3]
        assert await one.prefix_senders([], "3", 30) == []
        assert await one.prefix_senders(["d"], "1", 0.05) == [1]
        await asyncio.sleep(0.15)
        assert await two.prefix_senders(["d"], "2", 30) == [1]  # the first send has expired

    asyncio.run(scenario())
