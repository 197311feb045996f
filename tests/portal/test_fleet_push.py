"""/ws/fleet/: staff only; the first message is the whole view; the publisher pushes changes
(and only changes) to every socket of this process."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from accounts.models import User
from fleet.models import Worker
from fleet.services import worker_register, worker_set_state
from ocsweb.asgi import application
from portal.consumers import FleetConsumer
from portal.fleet_push import FleetPublisher, publisher

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(user: User | None) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(FleetConsumer.as_asgi(), "/ws/fleet/")
    if user is not None:
        socket.scope["user"] = user
    return socket


def test_students_and_strangers_are_refused(student: User) -> None:
    from django.contrib.auth.models import AnonymousUser

    async def scenario(user: Any) -> tuple[bool, int | None]:
        socket = communicator(user)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    assert asyncio.run(scenario(student)) == (False, 4403)
    assert asyncio.run(scenario(AnonymousUser())) == (False, 4403)


def test_socket_from_another_site_is_refused() -> None:
    async def scenario() -> bool:
        socket = WebsocketCommunicator(application, "/ws/fleet/", headers=[(b"origin", b"https://evil.example"),
                                                                          (b"host", b"127.0.0.1")])
        connected, _ = await socket.connect()
        await socket.disconnect()
        return connected

    assert asyncio.run(scenario()) is False


def test_teacher_gets_the_view_then_pushed_changes(teacher: User) -> None:
    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy", slots=2)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        socket = communicator(teacher)
        connected, _ = await socket.connect()
        assert connected
        first = await socket.receive_json_from(timeout=10)
        await publisher.publish_once()  # nothing changed: nothing sent
        assert await socket.receive_nothing(timeout=0.3)
        # The change reaches the page, whether this explicit round or the commit's nudge (with
        # Redis the nudge can win the race) sends it.
        await sync_to_async(worker_set_state)(worker=worker, state=Worker.State.DOWN, reason="killed")
        await publisher.publish_once()
        second = await socket.receive_json_from(timeout=10)
        assert await socket.receive_nothing(timeout=0.3)  # one copy, however it was sent
        await socket.disconnect()
        return first, second

    publisher.interval_s, saved = 300.0, publisher.interval_s  # no periodic round during the test
    try:
        first, second = asyncio.run(scenario())
    finally:
        publisher.interval_s = saved
    assert first["type"] == "status"
    (row,) = first["status"]["workers"]
    assert (row["name"], row["state"], row["slots"], row["busy"], row["queue"]) == ("w1", "healthy", 2, 0, 0)
    assert "base_url" not in row
    assert second["status"]["workers"][0]["state"] == "down"
    assert second["status"]["events"][0]["reason"] == "killed"
    assert publisher.watchers == 0


def test_a_round_sends_only_when_the_view_changed(teacher: User) -> None:
    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy", slots=2)

    async def scenario() -> list[bool]:
        from portal.fleet_status import fleet_status

        local = FleetPublisher(interval_s=300.0)  # never subscribed: no loop, no nudges, only these rounds
        local.last = await fleet_status()
        rounds = [await local.publish_once()]
        await sync_to_async(worker_set_state)(worker=worker, state=Worker.State.DOWN, reason="killed")
        rounds += [await local.publish_once(), await local.publish_once()]
        return rounds

    assert asyncio.run(scenario()) == [False, True, False]


def test_publisher_runs_only_while_someone_watches(teacher: User) -> None:
    async def scenario() -> list[bool]:
        local = FleetPublisher(interval_s=0.05)
        await local.subscribe()
        running = [local._task is not None and not local._task.done()]
        local.unsubscribe()
        await asyncio.sleep(0.1)
        running.append(local._task is not None)
        return running

    assert asyncio.run(scenario()) == [True, False]


def test_view_shows_rigs_gpus_rates_and_cold_starts(teacher: User) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from fleet.models import Gpu, Rig
    from portal.fleet_status import fleet_status
    from tests.portal.test_pages import log_request

    rig = Rig.objects.create(name="rig-a", address="100.64.0.2", token_prefix="p", token_hash="h",
                             last_heartbeat_at=timezone.now(), agent_version="1.2")
    Gpu.objects.create(rig=rig, index=0, name="RTX 3090", memory_total_mib=24576, memory_used_mib=12288,
                       utilization_pct=87, temperature_c=71, power_w=312.6)
    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="starting")
    worker.rig = rig
    worker.gpu_indices = [0]
    worker.save(update_fields=["rig", "gpu_indices"])
    worker.process_started_at = timezone.now() - timedelta(seconds=42)  # its process started 42 s ago
    worker.slot_files_pruned = 3
    worker.save(update_fields=["process_started_at", "slot_files_pruned"])
    worker_set_state(worker=worker, state=Worker.State.HEALTHY, reason="probe ok")
    for rate in (40.0, 50.0, 90.0):
        log_request(teacher, worker_id=worker.id, tokens_per_s=rate)

    status = asyncio.run(fleet_status())
    (rig_view,) = status["rigs"]
    assert rig_view["name"] == "rig-a" and rig_view["heartbeat_age_s"] <= 5
    assert rig_view["gpus"] == [{"index": 0, "name": "RTX 3090", "utilization_pct": 87, "memory_used_mib": 12288,
                                 "memory_total_mib": 24576, "temperature_c": 71, "power_w": 313}]
    (row,) = status["workers"]
    assert row["rig"] == "rig-a" and row["gpus"] == [0]
    assert row["tokens_per_s"] == 50.0
    assert 41 <= row["cold_start_s"] <= 44
    assert row["slot_files_pruned"] == 3


def test_a_change_announced_reaches_the_page_before_the_next_tick(teacher: User) -> None:
    """The nudge path: a worker event's commit (with Redis, from any process) wakes the publisher."""
    from portal.fleet_push import announce_fleet_change

    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy")

    async def scenario() -> str:
        socket = communicator(teacher)
        await socket.connect()
        await socket.receive_json_from(timeout=10)
        await sync_to_async(worker_set_state)(worker=worker, state=Worker.State.DRAINING, reason="drained by test")
        await sync_to_async(announce_fleet_change)()
        pushed = await socket.receive_json_from(timeout=10)
        await socket.disconnect()
        return str(pushed["status"]["workers"][0]["state"])

    publisher.interval_s, saved = 300.0, publisher.interval_s
    try:
        assert asyncio.run(scenario()) == "draining"
    finally:
        publisher.interval_s = saved
