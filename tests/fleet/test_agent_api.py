from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.services import key_issue
from fleet.models import Gpu, Rig, Worker, WorkerEvent
from fleet.rigs import rig_create, rigs_sweep_silent

pytestmark = pytest.mark.django_db

WORKERS = [
    {"name": "rig1-a", "model_id": "qwen-7b", "port": 8080, "slots": 4, "context_per_slot": 8192,
     "pool": "production", "gpus": [0, 1, 2, 3], "launch": {"split_mode": "layer"}},
    {"name": "rig1-b", "model_id": "qwen-7b", "port": 8081, "slots": 2, "pool": "dev", "gpus": [4, 5, 6, 7]},
]
GPU = {"index": 0, "name": "GTX 1070", "uuid": "GPU-1", "memory_total_mib": 8192, "memory_used_mib": 4000,
       "utilization_pct": 55, "temperature_c": 70, "power_w": 120.5, "sm_clock_mhz": 1700, "mem_clock_mhz": 4000,
       "pcie_gen": 1, "pcie_width": 1}


def post(path: str, body: dict, token: str | None) -> object:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().post(path, body, content_type="application/json", **headers)


@pytest.fixture
def rig() -> tuple[Rig, str]:
    return rig_create(name="rig1", address="100.64.0.12")


def test_register_creates_workers_at_the_rigs_own_address(rig) -> None:  # noqa: ANN001
    response = post("/agent/v1/register", {"agent_version": "ocs-agent/1", "workers": WORKERS}, rig[1])
    assert response.status_code == 200, response.content
    a = Worker.objects.get(name="rig1-a")
    assert a.base_url == "http://100.64.0.12:8080" and a.rig_id == rig[0].id
    assert (a.slots, a.gpu_indices, a.launch, a.pool.name) == (4, [0, 1, 2, 3], {"split_mode": "layer"}, "production")
    assert a.model.context_length == 8192 and a.state == "starting"
    assert Worker.objects.get(name="rig1-b").pool.name == "dev"


def test_reregistering_keeps_a_teachers_pool_choice_and_retires_removed_workers(rig) -> None:  # noqa: ANN001
    from fleet.models import Pool
    from fleet.services import worker_move

    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    worker_move(worker=Worker.objects.get(name="rig1-a"), pool=Pool.objects.get(name="dev"))
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS[:1]}, rig[1])
    assert Worker.objects.get(name="rig1-a").pool.name == "dev"
    assert Worker.objects.get(name="rig1-b").state == "disabled"


def test_heartbeat_stores_telemetry_and_a_crashed_process_takes_its_worker_down(rig) -> None:  # noqa: ANN001
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    Worker.objects.filter(name="rig1-a").update(state="healthy")
    body = {"gpu_status": "8 GPU(s)", "gpus": [GPU],
            "workers": [{"name": "rig1-a", "process_state": "backoff", "last_exit_code": -9, "restarts": 1},
                        {"name": "rig1-b", "process_state": "running"}]}
    assert post("/agent/v1/heartbeat", body, rig[1]).status_code == 200
    gpu = Gpu.objects.get(rig=rig[0], index=0)
    assert (gpu.utilization_pct, gpu.power_w, gpu.pcie_width) == (55, 120.5, 1)
    a = Worker.objects.get(name="rig1-a")
    assert a.state == "down" and a.process_state == "backoff"
    assert "exit code -9" in WorkerEvent.objects.filter(worker=a, to_state="down").first().reason
    rig[0].refresh_from_db()
    assert rig[0].gpu_status == "8 GPU(s)" and rig[0].last_heartbeat_at is not None


def test_agent_endpoints_refuse_student_keys_wrong_tokens_and_no_token(rig, student) -> None:  # noqa: ANN001
    _key, student_raw = key_issue(user=student)
    _other_rig, other_token = rig_create(name="rig2", address="100.64.0.13")
    for token in [student_raw, rig[1][:-1] + ("x" if rig[1][-1] != "x" else "y"), "ocsrig-aaaaaaaaaa-" + "B" * 40, None]:
        for path in ["/agent/v1/register", "/agent/v1/heartbeat"]:
            response = post(path, {"agent_version": "v", "workers": WORKERS}, token)
            assert response.status_code == 401, (token, path)
    assert not Worker.objects.exists()
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    stolen = post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS[:1]}, other_token)
    assert stolen.status_code == 409  # a rig cannot take over another rig's worker


def test_bad_agent_bodies_are_400_with_field_errors(rig) -> None:  # noqa: ANN001
    response = post("/agent/v1/register", {"agent_version": "v", "workers": [{"name": "x", "port": 0}]}, rig[1])
    assert response.status_code == 400 and "workers" in response.json()


def test_workers_of_a_silent_rig_are_taken_out_of_service(rig) -> None:  # noqa: ANN001
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    Worker.objects.update(state="healthy")
    assert rigs_sweep_silent(silent_after_s=30) == []
    Rig.objects.filter(id=rig[0].id).update(last_heartbeat_at=timezone.now() - timedelta(seconds=31))
    assert sorted(rigs_sweep_silent(silent_after_s=30)) == ["rig1-a", "rig1-b"]
    assert set(Worker.objects.values_list("state", flat=True)) == {"down"}
