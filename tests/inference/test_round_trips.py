"""What one request costs in round trips to Redis, the live state every gateway process shares
(issue 24): counted by the live state itself (ocs_live_state_round_trips_total), for a request
that finds a free slot, through the real pipeline to the real llama-server. The budget:

    admission: the quota step with the keys generation          1
    the load with whose turn it is in the shared line           1
    the slot claim with the conversation's worker               1
    the end: slot, concurrency, tokens and fair share freed     1

A new round trip on this path fails here, with the operations named."""
from __future__ import annotations

import asyncio
import json

import pytest
from django.conf import settings
from prometheus_client import REGISTRY

from tests.api_client import ApiClient
from tests.conftest import MODEL_ID

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not settings.REDIS_URL, reason="needs the Redis back end")]
BUDGET = 4


def trips() -> dict[str, float]:
    found: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name == "ocs_live_state_round_trips":
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    found[sample.labels["op"]] = sample.value
    return found


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {op: after[op] - before.get(op, 0) for op in after if after[op] - before.get(op, 0)}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_request_with_a_free_slot_makes_four_round_trips(worker, student_key, stream: bool) -> None:  # noqa: ANN001
    _, raw = student_key

    async def ask(text: str) -> None:
        response = await ApiClient().apost("/v1/chat/completions", json.dumps({
            "model": MODEL_ID, "max_tokens": 4, "stream": stream, "messages": [{"role": "user", "content": text}]}),
            content_type="application/json", headers={"Authorization": f"Bearer {raw}"})
        assert response.status_code == 200
        if stream:
            assert b"[DONE]" in response.content

    async def measured() -> dict[str, float]:
        await ask("warm up: the process reads the keys generation once")
        before = trips()
        await ask("Say ok")
        await asyncio.sleep(0)
        return spent(before, trips())

    # The fair policy's live override is read at most once a second per process
    # (admission.active_policy), not per request: left out when the second request falls on it.
    used = {op: n for op, n in asyncio.run(measured()).items() if op != "fair_policy"}
    assert sum(used.values()) <= BUDGET, f"{sum(used.values()):.0f} round trips: {used}"
    assert {"admit_seen", "view", "claim_slot", "finish"} >= set(used), used


def test_each_round_trip_before_the_worker_is_timed_in_both_its_waits(worker, student_key) -> None:  # noqa: ANN001
    """/metrics says how long each operation's round trips took, and with the lean client whether
    the time went waiting for Redis (`reply`) or for the gateway's event loop (`resume`)."""
    _, raw = student_key

    def timed() -> dict[tuple[str, str], float]:
        return {(s.labels["op"], s.labels["part"]): s.value for metric in REGISTRY.collect()
                if metric.name == "ocs_live_state_round_trip_seconds" for s in metric.samples
                if s.name.endswith("_count")}

    async def ask() -> None:
        response = await ApiClient().apost("/v1/chat/completions", json.dumps({
            "model": MODEL_ID, "max_tokens": 2, "messages": [{"role": "user", "content": "Say ok"}]}),
            content_type="application/json", headers={"Authorization": f"Bearer {raw}"})
        assert response.status_code == 200

    before = timed()
    asyncio.run(ask())
    after = timed()
    parts = ("all", "reply", "resume") if settings.OCS_LIVE_REDIS_CLIENT == "lean" else ("all",)
    for op in ("view", "claim_slot", "finish"):
        for part in parts:
            assert after.get((op, part), 0) > before.get((op, part), 0), (op, part)
