"""A request's steps (inference/request_context.py STEPS): kept on its log row as milliseconds
since arrival, and counted on /metrics (ocs_request_step_seconds, by step), on either back end.
Behaviour only: the times are ordered and not negative, never judged for speed."""
from __future__ import annotations

import asyncio
import json

import pytest
from django.test import AsyncClient

from inference import request_log
from inference.models import RequestLog
from inference.request_context import STEPS, RequestContext
from tests.api_client import ApiClient
from tests.conftest import MODEL_ID


def test_steps_are_kept_in_order_with_the_time_since_the_step_before() -> None:
    request_ctx = RequestContext(client="openai", path="/v1/chat/completions")
    request_ctx.steps_s = {"authenticated": 0.002, "admitted": 0.005, "upstream_first_byte": 0.020}
    assert request_ctx.step_durations_s() == [
        ("authenticated", 0.002), ("admitted", pytest.approx(0.003)), ("upstream_first_byte", pytest.approx(0.015))]
    assert request_ctx.row(status=200, error_code="")["steps_ms"] == {
        "authenticated": 2.0, "admitted": 5.0, "upstream_first_byte": 20.0}


@pytest.mark.integration
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_served_request_logs_every_step_in_order_and_metrics_count_them(
        worker, student_key, request_log_written, stream: bool) -> None:  # noqa: ANN001
    _, raw = student_key

    async def ask() -> str:
        response = await ApiClient().apost("/v1/chat/completions", json.dumps({
            "model": MODEL_ID, "max_tokens": 4, "stream": stream, "messages": [{"role": "user", "content": "Say ok"}]}),
            content_type="application/json", headers={"Authorization": f"Bearer {raw}"})
        assert response.status_code == 200
        return response["X-Request-Id"]

    async def metrics() -> str:
        response = await AsyncClient().get("/metrics")
        assert response.status_code == 200
        return response.content.decode()

    request_id = asyncio.run(ask())
    request_log.request_log().flush()
    steps = RequestLog.objects.get(request_id=request_id).steps_ms
    assert set(steps) == set(STEPS)  # (jsonb keeps its keys in its own order)
    times = [steps[step] for step in STEPS]
    assert times[0] >= 0 and times == sorted(times)

    exposed = asyncio.run(metrics())
    for step in STEPS:
        assert f'ocs_request_step_seconds_count{{step="{step}"}}' in exposed


@pytest.mark.integration
def test_a_refused_request_logs_the_steps_it_reached(student_key, request_log_written) -> None:  # noqa: ANN001
    _, raw = student_key

    async def ask() -> str:
        response = await ApiClient().apost("/v1/chat/completions", json.dumps({
            "model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}),
            content_type="application/json", headers={"Authorization": f"Bearer {raw}"})
        assert response.status_code == 404
        return response["X-Request-Id"]

    request_id = asyncio.run(ask())
    request_log.request_log().flush()
    steps = RequestLog.objects.get(request_id=request_id).steps_ms
    assert set(steps) == {"authenticated", "client_first_byte"}
    assert 0 <= steps["authenticated"] <= steps["client_first_byte"]
