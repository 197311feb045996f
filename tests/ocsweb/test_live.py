"""The live-state contract, on the in-process backend and (when REDIS_URL is set) on Redis."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from django.conf import settings

from core.live import InProcessLiveState, RedisLiveState, Settlement

BACKENDS = ["in-process"] + (["redis"] if settings.REDIS_URL else [])


def make_backends(kind: str, processes: int = 1) -> list:  # noqa: ANN401
    """`processes` independent instances sharing one store, as separate gateway processes would."""
    if kind == "in-process":
        shared = InProcessLiveState()
        return [shared] * processes
    namespace = f"{settings.OCS_LIVE_NAMESPACE}-{uuid.uuid4().hex[:8]}"
    return [RedisLiveState(settings.REDIS_URL, namespace) for _ in range(processes)]


@pytest.mark.parametrize("kind", BACKENDS)
def test_claims_stop_at_capacity_and_release_frees_a_slot(kind: str) -> None:
    (live,) = make_backends(kind)

    async def scenario() -> None:
        leases = [await live.claim("worker:7", 2, 30) for _ in range(3)]
        assert leases[0] and leases[1] and leases[2] is None
        assert (await live.busy(["worker:7", "worker:8"])) == {"worker:7": 2, "worker:8": 0}
        await live.release("worker:7", leases[0])
        assert (await live.view([7], None)).busy == {7: 1}
        assert await live.claim("worker:7", 2, 30) is not None

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_lease_that_is_not_renewed_expires_and_a_renewed_one_stays(kind: str) -> None:
    (live,) = make_backends(kind)

    async def scenario() -> None:
        # `kept` is renewed to a long lease; `dropped` has a short one and is never renewed.
        # Only "long enough" and "surely past" matter, so a slow machine cannot flip the result.
        kept = await live.claim("key:1", 2, 0.2)
        dropped = await live.claim("key:1", 2, 0.2)
        assert kept and dropped
        await live.renew_many([("key:1", kept)], 30)
        await asyncio.sleep(0.4)  # `dropped` has now outlived its lease; `kept` has not
        assert (await live.busy(["key:1"])) == {"key:1": 1}
        assert await live.claim("key:1", 2, 30) is not None

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_concurrent_claims_from_several_processes_never_exceed_capacity(kind: str) -> None:
    backends = make_backends(kind, processes=2)

    async def scenario() -> list[str | None]:
        claims = [backends[i % 2].claim("worker:42", 3, 30) for i in range(60)]
        return await asyncio.gather(*claims)

    results = asyncio.run(scenario())
    assert sum(1 for r in results if r) == 3


@pytest.mark.parametrize("kind", BACKENDS)
def test_generation_bumps_are_seen_by_every_process(kind: str) -> None:
    first, second = make_backends(kind, processes=2)

    async def read() -> int:
        return await second.generation("keys")

    before = asyncio.run(read())
    first.bump_generation("keys")
    assert asyncio.run(read()) == before + 1


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


def _fair_counter(live: InProcessLiveState | RedisLiveState, policy: str, line: str, student: str) -> float:
    if isinstance(live, InProcessLiveState):
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
                                      token_scopes=("user:8",), token_periods=("2026-12-01", "2026-W49"),
                                      token_delta=-120, fair_line="1:m", fair_policy="tokens", fair_student="8",
                                      fair_amount=25.0))
        assert (await second.busy(["worker:3", "conc:user:8"])) == {"worker:3": 1, "conc:user:8": 0}
        assert second.tokens_used_sync("user:8", "2026-12-01") == 380
        assert second.tokens_used_sync("user:8", "2026-W49") == -120
        assert _fair_counter(second, "tokens", "1:m", "8") == 75.0
        await first.finish(Settlement())  # nothing to do is fine

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_queue_depths_add_up_across_processes_and_vanish_with_a_dead_one(kind: str) -> None:
    first, second = make_backends(kind, processes=2)

    async def scenario() -> None:
        await first.publish_queue("gw-a", {"1:m": 3, "2:m": 0}, 1.0)
        await second.publish_queue("gw-b", {"1:m": 2}, 30)
        assert second.queue_depths_sync() == {"1:m": 5}
        await second.publish_queue("gw-b", {"1:m": 0}, 30)  # its queue drained
        assert first.queue_depths_sync() == {"1:m": 3}
        await asyncio.sleep(1.2)  # gw-a stopped reporting (died)
        assert first.queue_depths_sync() == {}

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", BACKENDS)
def test_hundreds_of_requests_at_once_wait_for_a_connection_instead_of_failing(kind: str) -> None:
    """A busy gateway process has hundreds of requests touching live state at the same moment;
    redis-py's default pool refuses the 101st at once (MaxConnectionsError, which became 503s
    at 128 streams in bench_gateway). They must queue for a connection instead."""
    (live,) = make_backends(kind)

    async def burst() -> list[str | None]:
        return await asyncio.gather(*(live.claim("burst", 1000, 30) for _ in range(400)))

    leases = asyncio.run(burst())
    assert all(leases) and len(set(leases)) == 400


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
