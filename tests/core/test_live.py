"""The live-state mechanism's contract (leases, generations, queue depths, connections), on the
in-process backend and (when REDIS_URL is set) on Redis, as the site composes it (ocsweb/live.py)."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from django.conf import settings

from ocsweb.live import SiteInProcessLiveState, SiteRedisLiveState

BACKENDS = ["in-process"] + (["redis"] if settings.REDIS_URL else [])


def make_backends(kind: str, processes: int = 1) -> list:  # noqa: ANN401
    """`processes` independent instances sharing one store, as separate gateway processes would."""
    if kind == "in-process":
        shared = SiteInProcessLiveState()
        return [shared] * processes
    namespace = f"{settings.OCS_LIVE_NAMESPACE}-{uuid.uuid4().hex[:8]}"
    return [SiteRedisLiveState(settings.REDIS_URL, namespace) for _ in range(processes)]


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
