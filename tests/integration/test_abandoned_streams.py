"""A student who closes the tab at the first byte: the worker's slot comes back (busy slots
return to zero) and the request log says 499 with what was delivered, not 200. (Leaving while
queued, during keep-alives, is in test_hostile_worker.py, where a worker holds its slot for as
long as the test needs.)"""
from __future__ import annotations

import re
import time
import uuid

import httpx
import pytest
from django.conf import settings

from tests.conftest import MODEL_ID, wait_for

pytestmark = pytest.mark.integration

LONG = {"model": MODEL_ID, "stream": True, "max_tokens": 2000,
        "messages": [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]}


def busy(gateway) -> float:  # noqa: ANN001
    text = httpx.get(gateway.url + "/metrics", timeout=10).text
    match = re.search(r'ocs_worker_busy_slots\{pool="production",worker="it-worker"\} ([0-9.]+)', text)
    return float(match.group(1)) if match else -1.0


def one_slot(worker) -> None:  # noqa: ANN001
    worker.slots = 1
    worker.save(update_fields=["slots"])
    time.sleep(settings.OCS["FLEET_CACHE_TTL_S"] + 0.2)


def first_data(response: httpx.Response) -> bytes:
    """The first chunk with the worker's data (keep-alive comments come first when it queues)."""
    for chunk in response.iter_raw():
        if b"data:" in chunk:
            return chunk
    raise AssertionError("the stream ended without data")


def test_leaving_at_the_first_byte_frees_the_slot_and_logs_499(gateway, worker, student_key) -> None:  # noqa: ANN001
    from inference.models import RequestLog

    one_slot(worker)
    agent = f"abandon-test-{uuid.uuid4().hex}"  # this test's rows only (other tests' rows may land late)
    headers = {"Authorization": f"Bearer {student_key[1]}", "User-Agent": agent}
    for _ in range(3):
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=LONG, headers=headers, timeout=60) as r:
            assert r.status_code == 200
            first_data(r)  # the worker's first chunk: then the tab closes
    assert wait_for(lambda: busy(gateway) == 0, 10)
    rows = wait_for(lambda: list(RequestLog.objects.filter(status=499, user_agent=agent)) or None, 10)
    assert rows and len(rows) == 3
    assert [(row.error_code, row.worker_name, row.ttft_ms is not None) for row in rows] == [
        ("client_closed", "it-worker", True)] * 3
