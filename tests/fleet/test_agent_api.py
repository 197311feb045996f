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
    from fleet.services import catalog_model_ensure

    catalog_model_ensure(public_id="qwen-7b", context_length=8192)  # the teacher's side: the catalogue
    return rig_create(name="rig1", address="100.64.0.12")


def test_register_creates_workers_at_the_rigs_own_address(rig) -> None:  # noqa: ANN001
    response = post("/agent/v1/register", {"agent_version": "ocs-agent/1", "workers": WORKERS}, rig[1])
    assert response.status_code == 200, response.content
    a = Worker.objects.get(name="rig1-a")
    assert a.base_url == "http://100.64.0.12:8080" and a.rig_id == rig[0].id
    assert (a.slots, a.gpu_indices, a.launch, a.pool.name) == (4, [0, 1, 2, 3], {"split_mode": "layer"}, "production")
    assert a.model.context_length == 8192 and a.state == "starting"
    assert Worker.objects.get(name="rig1-b").pool.name == "dev"


def test_a_rig_config_keeps_a_worker_for_short_prompts_and_the_fleet_snapshot_routes_by_it(rig) -> None:  # noqa: ANN001
    from fleet.selectors import _load_snapshot

    workers = [WORKERS[0], {**WORKERS[1], "pool": "production", "lane_tokens": 1024}]
    assert post("/agent/v1/register", {"agent_version": "v", "workers": workers}, rig[1]).status_code == 200
    assert Worker.objects.get(name="rig1-b").lane_tokens == 1024
    assert Worker.objects.get(name="rig1-a").lane_tokens == 0
    lanes = {w.name: w.lane_tokens for w in _load_snapshot.__wrapped__().workers}  # type: ignore[attr-defined]
    assert (lanes["rig1-a"], lanes["rig1-b"]) == (0, 1024)
    # the rig's config is the source: a registration without it makes the worker ordinary again
    assert post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1]).status_code == 200
    assert Worker.objects.get(name="rig1-b").lane_tokens == 0
    refused = post("/agent/v1/register", {"agent_version": "v", "workers": [{**WORKERS[0], "lane_tokens": -1}]}, rig[1])
    assert refused.status_code == 400 and b"lane_tokens" in refused.content


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
                        {"name": "rig1-b", "process_state": "running", "slot_files_pruned": 7}]}
    assert post("/agent/v1/heartbeat", body, rig[1]).status_code == 200
    assert Worker.objects.get(name="rig1-b").slot_files_pruned == 7  # the operator sees the budget is tight
    assert Worker.objects.get(name="rig1-a").slot_files_pruned == 0  # an older agent's report: unchanged
    gpu = Gpu.objects.get(rig=rig[0], index=0)
    assert (gpu.utilization_pct, gpu.power_w, gpu.pcie_width) == (55, 120.5, 1)
    a = Worker.objects.get(name="rig1-a")
    assert a.state == "down" and a.process_state == "backoff"
    assert "exit code -9" in WorkerEvent.objects.filter(worker=a, to_state="down").first().reason
    rig[0].refresh_from_db()
    assert rig[0].gpu_status == "8 GPU(s)" and rig[0].last_heartbeat_at is not None


def test_gpu_samples_are_dated_by_when_the_agent_read_them_on_the_control_planes_clock(rig) -> None:  # noqa: ANN001
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    # The rig's clock is an hour behind; it read GPU 0 four seconds before sending, GPU 1 just now.
    rig_now = timezone.now().timestamp() - 3600
    gpus = [{**GPU, "sampled_at": rig_now - 4, "pcie_max_gen": 3, "pcie_max_width": 16},
            {**GPU, "index": 1, "sampled_at": rig_now}]
    before = timezone.now()
    assert post("/agent/v1/heartbeat", {"gpu_status": "2 GPU(s)", "gpus": gpus, "workers": [],
                                        "sent_at": rig_now}, rig[1]).status_code == 200
    after = timezone.now()
    first, second = Gpu.objects.filter(rig=rig[0]).order_by("index")
    assert before - timedelta(seconds=4) <= first.sampled_at <= after - timedelta(seconds=4)
    assert before <= second.sampled_at <= after
    assert (first.pcie_gen, first.pcie_max_gen, first.pcie_max_width) == (1, 3, 16)
    assert second.pcie_max_gen is None  # an agent that does not report it


def test_a_sample_never_lands_after_its_heartbeat_arrived() -> None:
    from fleet.rigs import sample_time

    received = timezone.now()
    # A rig clock running ahead, and a sample stamped after its heartbeat: clamped to arrival.
    assert sample_time(sampled_at=2e9 + 5, sent_at=2e9, received=received) == received
    assert sample_time(sampled_at=2e9 - 2.5, sent_at=2e9, received=received) == received - timedelta(seconds=2.5)
    assert sample_time(sampled_at=None, sent_at=2e9, received=received) == received
    assert sample_time(sampled_at=2e9, sent_at=None, received=received) == received


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


def test_a_rig_token_cannot_claim_a_worker_registered_by_hand(rig) -> None:  # noqa: ANN001
    from fleet.services import worker_register

    worker_register(name="rig1-a", base_url="http://10.0.0.5:8080", model_id="qwen-7b", pool_name="production",
                    state="healthy")
    response = post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS[:1]}, rig[1])
    assert response.status_code == 409 and "registered by hand" in response.json()["detail"]
    worker = Worker.objects.get(name="rig1-a")
    assert (worker.rig_id, worker.base_url, worker.state) == (None, "http://10.0.0.5:8080", "healthy")


@pytest.mark.parametrize("field, value", [
    ("context_per_slot", 1), ("context_per_slot", 511), ("context_per_slot", 10**9), ("slots", 0),
    ("slots", 100_000), ("gpus", [0, 0]), ("gpus", [64]), ("gpus", list(range(65))), ("name", "../etc"),
    ("port", 70_000), ("launch", {"x": "y" * 5000}),
])
def test_out_of_bounds_worker_declarations_are_refused_with_the_reason(rig, field, value) -> None:  # noqa: ANN001
    declaration = {**WORKERS[0], field: value}
    response = post("/agent/v1/register", {"agent_version": "v", "workers": [declaration]}, rig[1])
    assert response.status_code == 400, response.content
    assert response.json()["detail"].startswith("report refused: workers[0].") and field in response.json()["detail"]
    assert not Worker.objects.exists()


def test_two_declarations_of_one_worker_are_refused(rig) -> None:  # noqa: ANN001
    response = post("/agent/v1/register", {"agent_version": "v", "workers": [WORKERS[0], WORKERS[0]]}, rig[1])
    assert response.status_code == 400 and "only once" in response.json()["detail"]


@pytest.mark.parametrize("field, value", [
    ("temperature_c", 40_000), ("temperature_c", 151), ("utilization_pct", 101), ("memory_total_mib", 2**40),
    ("memory_used_mib", 9000), ("power_w", 1e9), ("index", 64), ("pcie_gen", 1000),
])
def test_out_of_bounds_gpu_telemetry_is_refused_and_nothing_is_stored(rig, field, value) -> None:  # noqa: ANN001
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    body = {"gpu_status": "1 GPU(s)", "gpus": [{**GPU, field: value}], "workers": []}
    response = post("/agent/v1/heartbeat", body, rig[1])
    assert response.status_code == 400, response.content
    assert "report refused: gpus[0]" in response.json()["detail"]
    assert not Gpu.objects.exists()


def test_a_heartbeat_naming_one_gpu_twice_is_refused(rig) -> None:  # noqa: ANN001
    body = {"gpu_status": "2 GPU(s)", "gpus": [GPU, GPU], "workers": []}
    response = post("/agent/v1/heartbeat", body, rig[1])
    assert response.status_code == 400 and "only once" in response.json()["detail"]


def test_reregistering_makes_a_worker_left_healthy_starting_again(rig) -> None:  # noqa: ANN001
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    Worker.objects.filter(name="rig1-a").update(state="healthy")
    Worker.objects.filter(name="rig1-b").update(state="disabled")  # a teacher's choice survives
    assert post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1]).status_code == 200
    assert Worker.objects.get(name="rig1-a").state == "starting"
    assert Worker.objects.get(name="rig1-b").state == "disabled"


def test_a_new_llama_server_process_makes_its_serving_worker_starting(rig) -> None:  # noqa: ANN001
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    first = {"gpu_status": "", "gpus": [], "workers": [{"name": "rig1-a", "process_state": "running", "pid": 100,
                                                        "uptime_s": 5.0}]}
    assert post("/agent/v1/heartbeat", first, rig[1]).status_code == 200
    Worker.objects.filter(name="rig1-a").update(state="healthy")
    assert post("/agent/v1/heartbeat", first, rig[1]).status_code == 200
    assert Worker.objects.get(name="rig1-a").state == "healthy"  # same process: nothing changes
    restarted = {"gpu_status": "", "gpus": [], "workers": [{"name": "rig1-a", "process_state": "starting",
                                                            "pid": 200, "uptime_s": 0.5}]}
    assert post("/agent/v1/heartbeat", restarted, rig[1]).status_code == 200
    worker = Worker.objects.get(name="rig1-a")
    assert (worker.state, worker.process_pid) == ("starting", 200)
    assert "restarted (pid 200)" in WorkerEvent.objects.filter(worker=worker).first().reason
    assert 0 <= (timezone.now() - worker.process_started_at).total_seconds() < 60


def test_a_restarted_rig_takes_its_stale_healthy_workers_out_of_service(rig) -> None:  # noqa: ANN001
    from fleet.rigs import rig_workers_reset

    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    Worker.objects.filter(name="rig1-a").update(state="healthy")
    Worker.objects.filter(name="rig1-b").update(state="draining")
    assert rig_workers_reset(rig=rig[0], reason="the last run did not stop cleanly") == ["rig1-a"]
    assert Worker.objects.get(name="rig1-a").state == "down"
    assert Worker.objects.get(name="rig1-b").state == "draining"


def test_the_agent_logs_why_the_control_plane_refused_its_report(rig, caplog) -> None:  # noqa: ANN001
    import logging

    import httpx

    from fleet.agent.config import AgentConfig, WorkerConfig
    from fleet.agent.runner import RigAgentRunner

    def through_django(request: httpx.Request) -> httpx.Response:  # the real views, in process
        answer = Client().post(request.url.path, request.content, content_type="application/json",
                               HTTP_AUTHORIZATION=request.headers["authorization"])
        return httpx.Response(answer.status_code, content=answer.content,
                              headers={"content-type": answer["Content-Type"]})

    config = AgentConfig(control_plane_url="http://control-plane", token=rig[1], rig_name="rig1",
                         address="100.64.0.12",
                         workers=(WorkerConfig(name="rig1-a", model_id="qwen-7b", port=8080, context=256, slots=1,
                                               model_path="/nonexistent.gguf"),))
    runner = RigAgentRunner(config, http=httpx.Client(transport=httpx.MockTransport(through_django)),
                            telemetry=lambda: ("no GPUs", []))
    runner.supervisors[0].tick = lambda: "stopped"  # type: ignore[method-assign]  # launch nothing
    with caplog.at_level(logging.ERROR, logger="ocs.agent"):
        result = runner.run_round()
    assert not result.registered
    refusals = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name == "ocs.agent"]
    assert any("400" in line and "workers[0].context_per_slot" in line and "greater than or equal to 512" in line
               for line in refusals), refusals
    assert not Worker.objects.exists()


def test_a_heartbeat_cannot_touch_another_rigs_workers(rig) -> None:  # noqa: ANN001
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1])
    Worker.objects.filter(name="rig1-a").update(state="healthy")
    _other, other_token = rig_create(name="rig2", address="100.64.0.13")
    body = {"gpu_status": "", "gpus": [], "workers": [{"name": "rig1-a", "process_state": "crashed", "pid": 7}]}
    assert post("/agent/v1/heartbeat", body, other_token).status_code == 200
    worker = Worker.objects.get(name="rig1-a")
    assert (worker.state, worker.process_state, worker.process_pid) == ("healthy", "", None)


def test_a_rig_token_cannot_create_a_pool_or_a_catalogue_model(rig) -> None:  # noqa: ANN001
    from fleet.models import CatalogModel, Pool

    new_pool = {**WORKERS[0], "pool": "rig-made"}
    response = post("/agent/v1/register", {"agent_version": "v", "workers": [new_pool]}, rig[1])
    assert response.status_code == 403 and "pool 'rig-made' does not exist" in response.json()["detail"]
    new_model = {**WORKERS[0], "model_id": "rig-made-model"}
    response = post("/agent/v1/register", {"agent_version": "v", "workers": [new_model]}, rig[1])
    assert response.status_code == 403 and "not in the catalogue" in response.json()["detail"]
    assert not Pool.objects.filter(name="rig-made").exists()
    assert not CatalogModel.objects.filter(public_id="rig-made-model").exists()
    assert not Worker.objects.filter(name="rig1-a").exists()


def test_a_rigs_report_never_lowers_the_catalogues_context(rig) -> None:  # noqa: ANN001
    from fleet.models import CatalogModel

    small = {**WORKERS[0], "slots": 2, "context_per_slot": 512, "launch": {"context": 1024, "slots": 2}}
    assert post("/agent/v1/register", {"agent_version": "v", "workers": [small]}, rig[1]).status_code == 200
    assert CatalogModel.objects.get(public_id="qwen-7b").context_length == 8192  # the teacher's setting
    assert Worker.objects.get(name="rig1-a").context_per_slot == 512  # the worker's own, as launched


def test_a_rigs_worker_never_advertises_more_context_than_the_catalogue(rig) -> None:  # noqa: ANN001
    """A rig that reports a larger slot than the teacher's catalogue figure is routed and advertised
    with the catalogue's; the catalogue stays as the teacher set it; a teacher lowering it later
    holds too."""
    from fleet.models import CatalogModel
    from fleet.selectors import _load_snapshot

    load = _load_snapshot.__wrapped__  # type: ignore[attr-defined]  # no reconnect: this test's transaction

    large = {**WORKERS[0], "slots": 2, "context_per_slot": 32768, "launch": {"context": 65536, "slots": 2}}
    assert post("/agent/v1/register", {"agent_version": "v", "workers": [large]}, rig[1]).status_code == 200
    worker = Worker.objects.get(name="rig1-a")
    assert worker.context_per_slot == 8192 and worker.launch["context"] == 65536  # the launch stays as reported
    assert CatalogModel.objects.get(public_id="qwen-7b").context_length == 8192
    snapshot = load()
    assert snapshot.models["qwen-7b"].context_length == 8192  # what /v1/models and Ollama's show tell clients
    assert [w.context for w in snapshot.workers] == [8192]  # what the scheduler routes long prompts by
    CatalogModel.objects.filter(public_id="qwen-7b").update(context_length=4096)  # a teacher lowers it
    snapshot = load()
    assert snapshot.models["qwen-7b"].context_length == 4096 and [w.context for w in snapshot.workers] == [4096]


def test_each_registration_gives_each_worker_a_new_key_sent_to_its_rig_only(rig) -> None:  # noqa: ANN001
    from fleet.selectors import _load_snapshot

    load = _load_snapshot.__wrapped__  # type: ignore[attr-defined]  # no reconnect: this test's transaction

    first = post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1]).json()
    keys = {row["name"]: row["api_key"] for row in first["workers"]}
    assert all(key.startswith("ocswk-") for key in keys.values()) and len(set(keys.values())) == 2
    assert Worker.objects.get(name="rig1-a").api_key == keys["rig1-a"]
    headers = {w.name: w.upstream_headers for w in load().workers}
    assert headers["rig1-a"]["Authorization"] == f"Bearer {keys['rig1-a']}"  # what the gateway sends
    assert keys["rig1-a"] not in repr(load().workers)  # kept out of reprs (tracebacks, logs)
    again = post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1]).json()
    rotated = {row["name"]: row["api_key"] for row in again["workers"]}
    assert rotated["rig1-a"] != keys["rig1-a"] and Worker.objects.get(name="rig1-a").api_key == rotated["rig1-a"]
    # A heartbeat's answer carries no key.
    beat = post("/agent/v1/heartbeat", {"gpu_status": "", "gpus": [], "workers": []}, rig[1])
    assert "ocswk-" not in beat.content.decode()


def test_a_workers_key_is_not_in_the_admins_pages_nor_the_fleet_view(rig, admin_client) -> None:  # noqa: ANN001
    import json

    from portal.fleet_status import _read_database

    answer = post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, rig[1]).json()
    key = answer["workers"][0]["api_key"]
    worker = Worker.objects.get(name="rig1-a")
    for url in ("/admin/fleet/worker/", f"/admin/fleet/worker/{worker.id}/change/"):
        page = admin_client.get(url)
        assert page.status_code == 200 and key not in page.content.decode() and "ocswk-" not in page.content.decode()
    # The teacher's fleet page and its websocket (read in this test's transaction: no reconnect).
    assert "ocswk-" not in json.dumps(_read_database.__wrapped__())  # type: ignore[attr-defined]


@pytest.mark.parametrize("declaration, reason", [
    ({"slots": 4, "context_per_slot": 8192, "launch": {"context": 1024, "slots": 4}}, "is not the launch's context"),
    ({"slots": 4, "launch": {"slots": 2}}, "is not the launch's (2)"),
    ({"slots": 4, "launch": {"context": "big"}}, "must be a positive integer"),
])
def test_reported_values_that_contradict_the_launch_are_refused(rig, declaration, reason) -> None:  # noqa: ANN001
    response = post("/agent/v1/register", {"agent_version": "v", "workers": [{**WORKERS[0], **declaration}]}, rig[1])
    assert response.status_code == 400 and reason in response.json()["detail"], response.json()


def test_the_agent_reports_its_model_files_facts_and_the_worker_keeps_them(rig) -> None:  # noqa: ANN001
    import httpx

    from fleet.agent.config import AgentConfig, WorkerConfig
    from fleet.agent.runner import RigAgentRunner
    from fleet.gguf import read_gguf
    from fleet.local_worker import find_default_model

    def through_django(request: httpx.Request) -> httpx.Response:  # the real views, in process
        answer = Client().post(request.url.path, request.content, content_type="application/json",
                               HTTP_AUTHORIZATION=request.headers["authorization"])
        return httpx.Response(answer.status_code, content=answer.content,
                              headers={"content-type": answer["Content-Type"]})

    model = find_default_model()
    config = AgentConfig(control_plane_url="http://control-plane", token=rig[1], rig_name="rig1",
                         address="100.64.0.12",
                         workers=(WorkerConfig(name="rig1-a", model_id="qwen-7b", port=8080, model_path=str(model),
                                               gpus=(0, 1)),
                                  WorkerConfig(name="rig1-b", model_id="qwen-7b", port=8081,
                                               model_path="/nonexistent.gguf")))
    runner = RigAgentRunner(config, http=httpx.Client(transport=httpx.MockTransport(through_django)),
                            telemetry=lambda: ("no GPUs", []))
    for supervisor in runner.supervisors:
        supervisor.tick = lambda: "stopped"  # type: ignore[method-assign]  # launch nothing
    assert runner.run_round().registered
    facts = read_gguf(model)
    reported = Worker.objects.get(name="rig1-a").launch["gguf"]
    assert reported == facts.as_dict() and reported["context_length"] == 8192 and len(reported["layer_bytes"]) == 30
    assert "gguf" not in Worker.objects.get(name="rig1-b").launch  # unreadable file: registered all the same


def test_malformed_gguf_facts_are_refused_with_the_reason(rig) -> None:  # noqa: ANN001
    body = {"agent_version": "v", "workers": [{**WORKERS[0], "gguf": {"architecture": "llama"}}]}
    response = post("/agent/v1/register", body, rig[1])
    assert response.status_code == 400 and "workers[0].gguf" in response.json()["detail"]
    too_big = {"agent_version": "v", "workers": [{**WORKERS[0], "gguf": {"layer_bytes": [1] * 10_000}}]}
    assert "must fit" in post("/agent/v1/register", too_big, rig[1]).json()["detail"]
