"""A gateway on Redis while Redis goes away and comes back (issue 9, item 8): /readyz says why,
API requests get 503 in the client's envelope, and service resumes without a restart."""
from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from tests.conftest import MODEL_ID, start_gateway
from tests.own_redis import OwnRedis, own_redis  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")]


def chat(url: str, key: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=60,
                      json={"model": MODEL_ID, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})


def messages(url: str, key: str) -> httpx.Response:
    return httpx.post(url + "/v1/messages", headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                      timeout=60, json={"model": MODEL_ID, "max_tokens": 4,
                                        "messages": [{"role": "user", "content": "Hi"}]})


@pytest.fixture
def gateway_on_own_redis(own_redis: OwnRedis, worker, tmp_path: Path):  # noqa: ANN001, ANN201
    gateway = start_gateway(tmp_path / "gateway.log", REDIS_URL=own_redis.url, OCS_KEY_CACHE_TTL_S="0",
                            OCS_FLEET_CACHE_TTL_S="0")
    yield gateway
    gateway.process.terminate()
    gateway.process.wait(timeout=15)


def test_readyz_says_redis_is_down_and_recovers_by_itself(gateway_on_own_redis, own_redis) -> None:  # noqa: ANN001
    assert httpx.get(gateway_on_own_redis.url + "/readyz").status_code == 200
    own_redis.stop()
    down = httpx.get(gateway_on_own_redis.url + "/readyz")
    assert down.status_code == 503 and down.json()["status"] == "live state unavailable"
    assert f"127.0.0.1:{own_redis.port}" in down.json()["reason"]
    own_redis.start()
    assert httpx.get(gateway_on_own_redis.url + "/readyz").status_code == 200


def test_api_requests_get_503_in_their_envelope_while_redis_is_down_and_200_after(
    gateway_on_own_redis, own_redis, student_key  # noqa: ANN001
) -> None:
    url, key = gateway_on_own_redis.url, student_key[1]
    assert chat(url, key).status_code == 200
    own_redis.stop()
    refused = chat(url, key)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["message"]
    anthropic = messages(url, key)
    assert anthropic.status_code in {503, 529} and anthropic.json()["type"] == "error", anthropic.text
    own_redis.start()
    assert chat(url, key).status_code == 200
    assert messages(url, key).status_code == 200
