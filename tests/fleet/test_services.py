from __future__ import annotations

import pytest

from fleet.models import Worker, WorkerEvent
from fleet.services import catalog_model_ensure, worker_disable, worker_drain, worker_enable, worker_register

pytestmark = pytest.mark.django_db


def test_the_catalogue_advertises_the_smallest_context_any_worker_has() -> None:
    assert catalog_model_ensure(public_id="m", context_length=8192).context_length == 8192
    assert catalog_model_ensure(public_id="m", context_length=16384).context_length == 8192
    assert catalog_model_ensure(public_id="m", context_length=4096).context_length == 4096
    assert catalog_model_ensure(public_id="m").context_length == 4096


def test_teacher_controls_record_every_transition() -> None:
    worker = worker_register(name="w", base_url="http://10.0.0.1:8080/", model_id="m", pool_name="production",
                             state="healthy")
    assert worker.base_url == "http://10.0.0.1:8080"
    assert worker_drain(worker=worker) and worker.state == "draining"
    assert not worker_drain(worker=worker)  # already draining: no duplicate event
    assert worker_disable(worker=worker) and worker_enable(worker=worker) and worker.state == "starting"
    assert not worker_enable(worker=worker)  # only a drained or disabled worker can be enabled
    transitions = list(WorkerEvent.objects.filter(worker=worker).order_by("at", "id").values_list("from_state", "to_state"))
    assert transitions == [("starting", "starting"), ("starting", "healthy"), ("healthy", "draining"),
                           ("draining", "disabled"), ("disabled", "starting")]
    assert Worker.objects.get(id=worker.id).state == "starting"


def test_the_first_healthy_probe_records_the_cold_start_from_process_start() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from fleet.services import worker_set_state

    started = timezone.now() - timedelta(seconds=42)
    worker = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production",
                             process_started_at=started)
    assert worker.state == "starting"
    assert worker_set_state(worker=worker, state="healthy", reason="/health: 200")
    event = WorkerEvent.objects.filter(worker=worker, to_state="healthy").get()
    assert event.cold_start_s is not None and 42 <= event.cold_start_s < 100
    assert "cold start 4" in event.reason
    # Later recoveries (down -> healthy) are not cold starts.
    worker_set_state(worker=worker, state="down", reason="x")
    worker_set_state(worker=worker, state="healthy", reason="y")
    assert WorkerEvent.objects.filter(worker=worker, cold_start_s__isnull=False).count() == 1


def test_a_worker_registered_again_is_starting_whatever_its_last_run_left() -> None:
    for left in ["healthy", "degraded", "down"]:
        worker = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production")
        Worker.objects.filter(id=worker.id).update(state=left)
        again = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production")
        assert again.state == "starting", left


def test_a_server_found_already_running_has_no_cold_start_to_record() -> None:
    worker = worker_register(name="w", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production",
                             state="healthy")  # register_worker: it answered /health 200 when we looked
    assert worker.state == "healthy"
    assert not WorkerEvent.objects.filter(worker=worker, cold_start_s__isnull=False).exists()
