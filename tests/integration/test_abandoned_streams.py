"""A student who closes the tab: at the first byte, while queued, or during keep-alives. Every
time the worker's slot comes back (busy slots return to zero), and the request log says 499
with what was delivered, not 200."""
from __future__ import annotations

import re
import threading
import time

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


def test_leaving_at_the_first_byte_frees_the_slot_and_logs_499(gateway, worker, student_key) -> None:  # noqa: ANN001
    from inference.models import RequestLog

    one_slot(worker)
    headers = {"Authorization": f"Bearer {student_key[1]}"}
    for _ in range(3):
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=LONG, headers=headers, timeout=60) as r:
            assert r.status_code == 200
            next(r.iter_raw())  # the first chunk: then the tab closes
    assert wait_for(lambda: busy(gateway) == 0, 10)
    rows = wait_for(lambda: list(RequestLog.objects.filter(status=499)) or None, 10)
    assert rows and len(rows) == 3
    assert all(row.error_code == "client_closed" and row.ttft_ms is not None and row.worker_name == "it-worker"
               for row in rows)


def test_leaving_while_queued_and_during_keepalives_frees_everything(gateway, worker, student_key) -> None:  # noqa: ANN001
    from inference.models import RequestLog

    one_slot(worker)
    headers = {"Authorization": f"Bearer {student_key[1]}"}
    holder_ready, release_holder = threading.Event(), threading.Event()

    def hold_the_slot() -> None:
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=LONG, headers=headers, timeout=120) as r:
            next(r.iter_raw())
            holder_ready.set()
            release_holder.wait(60)

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    assert holder_ready.wait(60)
    # queued past the grace period: the gateway answers 200 and sends keep-alives
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=LONG, headers=headers, timeout=60) as waiting:
        assert waiting.status_code == 200
        first = next(waiting.iter_raw())
        assert first.startswith(b":")  # a keep-alive comment: still queued
    release_holder.set()
    holder.join(30)
    assert wait_for(lambda: busy(gateway) == 0, 10)
    # the queue is empty again: a fresh request is served at once
    reply = httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=60,
                       json={**LONG, "stream": False, "max_tokens": 4})
    assert reply.status_code == 200
    queued_row = wait_for(lambda: RequestLog.objects.filter(status=499, worker_name="").first(), 10)
    assert queued_row is not None and queued_row.queue_wait_ms > 0  # left while queued: no worker, its wait kept
