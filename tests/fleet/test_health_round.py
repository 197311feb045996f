"""The monitor's round over real worker rows: llama-server's 503 "Loading model" is not ready,
and the first healthy probe of a starting worker records its cold start (issue 9, item 1).
llama-server's loading window is too short to catch with SmolLM2, so its /health answers come
from an httpx transport (the HTTP library boundary)."""
from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from fleet.health import probe_round
from fleet.hysteresis import HealthTracker
from fleet.models import Worker, WorkerEvent
from fleet.services import worker_register
from ocsweb.live import SiteRedisLiveState

pytestmark = pytest.mark.django_db(transaction=True)


def llama_server(status: int) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            body = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}} \
                if status == 503 else {"status": "ok"}
            return httpx.Response(status, json=body)
        return httpx.Response(200, json=[{"id": 0, "is_processing": False}])
    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


def one_round(tracker: HealthTracker, status: int) -> None:
    async def go() -> None:
        async with llama_server(status) as client:
            await probe_round(tracker, client, set())
    asyncio.run(go())


def test_loading_keeps_a_worker_starting_then_its_first_good_probe_records_the_cold_start() -> None:
    worker = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production",
                             process_started_at=timezone.now() - timedelta(seconds=30))
    tracker = HealthTracker()
    for _ in range(3):
        one_round(tracker, 503)
        assert Worker.objects.get(id=worker.id).state == "starting"
    one_round(tracker, 200)
    assert Worker.objects.get(id=worker.id).state == "healthy"
    event = WorkerEvent.objects.get(worker=worker, to_state="healthy")
    assert event.cold_start_s is not None and event.cold_start_s >= 30


def test_a_healthy_worker_answering_loading_goes_back_to_starting_and_its_new_cold_start_is_counted() -> None:
    worker = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production",
                             process_started_at=timezone.now() - timedelta(days=3), state="healthy")
    tracker = HealthTracker()
    one_round(tracker, 503)  # restarted outside any agent's view
    assert Worker.objects.get(id=worker.id).state == "starting"
    one_round(tracker, 200)
    event = WorkerEvent.objects.filter(worker=worker, to_state="healthy").first()
    assert event is not None and event.cold_start_s is not None
    assert event.cold_start_s < 3600  # from when it was seen loading, not from the old process's start


def test_the_monitor_keeps_probing_while_redis_is_away(monkeypatch) -> None:  # noqa: ANN001
    import core.live
    from fleet.local_worker import free_port

    monkeypatch.setattr(core.live, "_live_state",
                        SiteRedisLiveState(f"redis://127.0.0.1:{free_port()}/0"))  # nothing listens there
    worker = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production")
    one_round(HealthTracker(), 200)
    assert Worker.objects.get(id=worker.id).state == "healthy"


def test_a_worker_refusing_its_key_is_not_healthy_though_its_health_route_answers() -> None:
    """/health answers without a key, so /slots, sent with the worker's key, is what shows a worker
    launched with another key than its row holds: it could serve no request."""
    key = "ocswk-abcdefghij-" + "k" * 40
    worker = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production",
                             api_key=key)
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if request.headers.get("authorization") != f"Bearer {key}":
            return httpx.Response(401, json={"error": {"code": 401, "message": "Invalid API Key"}})
        return httpx.Response(200, json=[{"id": 0, "is_processing": True}])

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            await probe_round(tracker, client, set())

    tracker = HealthTracker()
    asyncio.run(go())
    assert Worker.objects.get(id=worker.id).state == "healthy" and seen == [f"Bearer {key}"] * 2
    Worker.objects.filter(id=worker.id).update(api_key="ocswk-abcdefghij-" + "o" * 40)  # another key than launched
    for _ in range(2):
        asyncio.run(go())
    assert Worker.objects.get(id=worker.id).state == "down"
    assert "401" in WorkerEvent.objects.filter(worker=worker).first().reason


def test_a_probe_out_while_the_worker_registers_again_never_marks_the_new_process_down() -> None:
    """The rig agent restarts (its old llama-server died) and registers the worker again while the
    monitor's probe of the dead one is out: the round judged the old state, so it changes nothing;
    the new process is `starting` until a probe of its own says otherwise."""
    from asgiref.sync import sync_to_async

    worker = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production",
                             state="healthy")
    tracker = HealthTracker()
    one_round(tracker, 500)
    assert Worker.objects.get(id=worker.id).state == "degraded"

    async def dead_while_it_registers(request: httpx.Request) -> httpx.Response:
        await sync_to_async(worker_register, thread_sensitive=False)(
            name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production")
        return httpx.Response(500, json={})

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(dead_while_it_registers)) as client:
            await probe_round(tracker, client, set())

    asyncio.run(go())
    assert Worker.objects.get(id=worker.id).state == "starting"
    assert not WorkerEvent.objects.filter(worker=worker, to_state="down").exists()
    one_round(tracker, 200)
    assert Worker.objects.get(id=worker.id).state == "healthy"
