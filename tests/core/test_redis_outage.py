"""Redis down: the live state says so with LiveStateUnavailable, /readyz says why, and service
resumes by itself when Redis returns (issue 9, item 8). Runs against a redis-server of its own,
stopped and started again on its loopback port, on either back end."""
from __future__ import annotations

import asyncio
import shutil

import pytest

from core.live import LiveStateUnavailable
from ocsweb.live import SiteRedisLiveState
from tests.own_redis import own_redis  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")


def test_redis_going_away_raises_live_state_unavailable_and_service_resumes_when_it_returns(own_redis) -> None:  # noqa: ANN001
    live = SiteRedisLiveState(own_redis.url, namespace="outage-test")

    async def scenario() -> None:
        lease = await live.claim("worker:1", 2, 30)
        assert lease is not None
        own_redis.stop()
        for call in (live.claim("worker:1", 2, 30), live.view([1], None), live.release("worker:1", lease),
                     live.check()):
            with pytest.raises(LiveStateUnavailable, match=f"Redis at 127.0.0.1:{own_redis.port} is unavailable"):
                await call
        with pytest.raises(LiveStateUnavailable):
            live.suspects_sync()
        own_redis.start()  # an empty Redis, as after a restart without persistence
        await live.check()
        assert await live.claim("worker:1", 1, 30) is not None  # the same object, no reset
        assert (await live.view([1], None)).busy == {1: 1}
        assert live.suspects_sync() == frozenset()

    asyncio.run(scenario())


@pytest.mark.django_db(transaction=True)
def test_readyz_says_why_while_redis_is_down_and_recovers(own_redis, monkeypatch) -> None:  # noqa: ANN001
    from tests.api_client import ApiClient

    import core.live
    from fleet.services import worker_register

    worker_register(name="ready-w", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                    state="healthy")
    monkeypatch.setattr(core.live, "_live_state", SiteRedisLiveState(own_redis.url, namespace="outage-test"))
    ready = ApiClient().get("/readyz")
    assert ready.status_code == 200, ready.content
    own_redis.stop()
    down = ApiClient().get("/readyz")
    assert down.status_code == 503
    assert down.json()["status"] == "live state unavailable"
    assert f"Redis at 127.0.0.1:{own_redis.port} is unavailable" in down.json()["reason"]
    own_redis.start()
    again = ApiClient().get("/readyz")
    assert again.status_code == 200, again.content
