"""/metrics: what the gateway counts, and who may read it."""
from __future__ import annotations

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import MODEL_ID, wait_for

pytestmark = pytest.mark.integration


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_requests_tokens_and_show_the_fleet(gateway, worker, student_key) -> None:  # noqa: ANN001
    before = samples(httpx.get(gateway.url + "/metrics").text)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=student_key[1], max_retries=0)
    client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    list(client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}],
                                        max_tokens=4, stream=True))
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-17", messages=[{"role": "user", "content": "Hi"}])
    ok = dict(client="openai", model=MODEL_ID, pool="production", status="200")

    def scraped() -> httpx.Response | None:
        # A stream ends (and is counted) just after its last byte leaves, so the client can ask
        # again a few milliseconds before the count moves: poll instead of racing it.
        response = httpx.get(gateway.url + "/metrics")
        grown = value(samples(response.text), "ocs_requests_total", **ok) - value(before, "ocs_requests_total", **ok)
        return response if grown >= 2 else None

    response = wait_for(scraped, timeout_s=5) or httpx.get(gateway.url + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    after = samples(response.text)
    assert value(after, "ocs_requests_total", **ok) - value(before, "ocs_requests_total", **ok) == 2
    # A name the catalogue does not know is never a label (random names must not grow /metrics).
    assert 'model="gpt-17"' not in response.text
    missing = dict(client="openai", model="-", pool="production", status="404")
    assert value(after, "ocs_requests_total", **missing) - value(before, "ocs_requests_total", **missing) == 1
    for direction in ("prompt", "completion"):
        grown = (value(after, "ocs_tokens_total", model=MODEL_ID, direction=direction)
                 - value(before, "ocs_tokens_total", model=MODEL_ID, direction=direction))
        assert grown >= 2, direction  # both answers counted, the stream's from its final chunk
    assert value(after, "ocs_first_byte_seconds_count", model=MODEL_ID) >= 2
    assert value(after, "ocs_queue_wait_seconds_count", model=MODEL_ID) >= 2
    assert value(after, "ocs_worker_state", worker="it-worker", pool="production", state="healthy") == 1
    assert value(after, "ocs_worker_slots", worker="it-worker", pool="production") == 4


def test_metrics_are_refused_to_requests_from_the_public_proxy(gateway) -> None:  # noqa: ANN001
    proxied = httpx.get(gateway.url + "/metrics", headers={"X-Forwarded-For": "203.0.113.7"})
    assert proxied.status_code == 403 and "ocs_requests" not in proxied.text
