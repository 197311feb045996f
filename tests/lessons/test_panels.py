"""The live panels show what this installation holds: the fleet, the student's own requests,
the latest benchmark. Workers' addresses never reach a student's page."""
from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from accounts.services import key_issue
from core.live import live_state, worker_resource
from fleet.models import Gpu, Pool, Rig, WorkerEvent
from fleet.services import worker_register
from lessons import research_bridge
from lessons.models import StepDone
from lessons.research_bridge import BenchmarkFact
from tests.lessons.helpers import COPILOT_AGENT, log_request

pytestmark = pytest.mark.django_db
MODEL = "smollm2-135m-instruct"


def _worker(name: str, pool: str = "production", url: str = "http://100.71.3.9:8080", slots: int = 4):  # noqa: ANN202
    return worker_register(name=name, base_url=url, model_id=MODEL, pool_name=pool, slots=slots, state="healthy")


def test_scheduling_panel_shows_pools_workers_busy_slots_and_queue(client, student) -> None:  # noqa: ANN001
    busy_worker = _worker("rig1-a")
    _worker("rig1-b", pool="dev", url="http://100.71.3.9:8081", slots=2)
    Pool.objects.filter(name="dev").update(may_lend=True)
    WorkerEvent.objects.create(worker=busy_worker, from_state="down", to_state="healthy", reason="2 good probes")
    live = live_state()
    lease = async_to_sync(live.claim)(worker_resource(busy_worker.id), 4, 30)
    production = Pool.objects.get(name="production")
    async_to_sync(live.publish_queue)("test-lessons", {f"{production.id}:{MODEL}": 3}, 30)
    try:
        client.force_login(student)
        html = client.get("/lessons/scheduling/").content.decode()
        data = client.get("/lessons/fleet.json").json()
    finally:
        async_to_sync(live.release)(worker_resource(busy_worker.id), lease or "")
        async_to_sync(live.publish_queue)("test-lessons", {}, 30)
    assert "rig1-a" in html and "rig1-b" in html and "1/4" in html and "2 good probes" in html
    assert "100.71.3.9" not in html and "100.71.3.9" not in str(data)  # addresses stay private
    workers = {w["name"]: w for w in data["workers"]}
    assert workers["rig1-a"]["busy"] == 1 and workers["rig1-b"] == {**workers["rig1-b"], "busy": 0, "pool": "dev"}
    assert {"pool": "production", "model": MODEL, "waiting": 3} in data["queue"]
    assert {p["name"]: p["may_lend"] for p in data["pools"]}["dev"] is True
    assert data["mine_in_flight"] == 0


def test_api_panel_shows_my_last_request_and_why_not_a_classmates(client, student, other_student) -> None:  # noqa: ANN001
    worker = _worker("rig1-b", pool="dev")
    key, _ = key_issue(user=student)
    other_key, _ = key_issue(user=other_student)
    log_request(user=student, key=key, worker=worker, ttft_ms=321, retries=1, at=timezone.now() - timedelta(minutes=5))
    log_request(user=other_student, key=other_key, worker=worker, ttft_ms=999)
    client.force_login(student)
    html = client.get("/lessons/api/").content.decode()
    panel = html.split('id="last-request"', 1)[1]
    assert "rig1-b" in panel and "321 ms" in panel and "999 ms" not in html
    assert "pool `dev` lent" in panel and "1 worker failed" in panel
    assert "/v1/responses" in html  # the dialect table says what this installation serves
    client.force_login(other_student)
    assert "999 ms" in client.get("/lessons/api/").content.decode()


def test_api_panel_says_so_when_there_is_no_request(client, student) -> None:  # noqa: ANN001
    client.force_login(student)
    assert 'id="last-request-none"' in client.get("/lessons/api/").content.decode()


def test_rigs_panel_shows_gpus_and_logical_workers(client, student) -> None:  # noqa: ANN001
    rig = Rig.objects.create(name="rig1", address="100.71.3.9", token_prefix="p1", token_hash="h",
                             last_heartbeat_at=timezone.now(), agent_version="ocs-agent/1")
    Gpu.objects.create(rig=rig, index=0, name="NVIDIA GeForce GTX 1070", memory_total_mib=8192, memory_used_mib=5100,
                       utilization_pct=14, pcie_gen=1, pcie_width=1, sampled_at=timezone.now())
    worker = _worker("rig1-a")
    worker.rig, worker.gpu_indices, worker.launch = rig, [0, 1, 2, 3], {"split_mode": "layer"}
    worker.save(update_fields=["rig", "gpu_indices", "launch"])
    client.force_login(student)
    html = client.get("/lessons/rigs-and-workers/").content.decode()
    assert "GTX 1070" in html and "14 %" in html and "5100/8192 MiB" in html and "Gen1 x1" in html
    assert "0, 1, 2, 3" in html and "layer" in html
    network = client.get("/lessons/netbird/").content.decode()
    assert "1 of 1 worker(s) have a NetBird address" in network and "ocs-agent/1" in network
    assert "100.71.3.9" not in html + network


def test_measurement_panel_without_research_runs_says_so(client, student) -> None:  # noqa: ANN001
    assert research_bridge.latest_benchmark() is None  # the research app has no runs here
    client.force_login(student)
    assert 'id="benchmark-none"' in client.get("/lessons/measurement/").content.decode()


def test_a_probe_is_not_a_measurement_of_the_workers(client, student) -> None:  # noqa: ANN001
    """A probe (share_probe, bench_live_client, judge_backends) measures the gateway's own workings
    and has no tokens/s: the lessons' measurement panel never shows one as the latest run."""
    from research.replay_services import probe_record

    probe_record(name="backends", base_url="", model="bench-replay", result={"judged": []})
    assert research_bridge.latest_benchmark() is None
    client.force_login(student)
    assert 'id="benchmark-none"' in client.get("/lessons/measurement/").content.decode()


def test_measurement_panel_shows_the_latest_run_beside_its_roofline(client, student, monkeypatch) -> None:  # noqa: ANN001
    run = BenchmarkFact(run_id=7, scenario="baseline", model="gemma-27b-q4km", finished_at=timezone.now(),
                        ttft_ms_p50=1800.0, generation_rate=12.5, prompt_eval_rate=10.85,
                        ceiling_tokens_per_s=15.8, url="/research/runs/7/")
    monkeypatch.setattr(research_bridge, "_load_runs", lambda limit: [run])
    key, _ = key_issue(user=student)
    log_request(user=student, key=key, worker=_worker("w1"), ttft_ms=432, request_id="d" * 32)
    client.force_login(student)
    html = client.get("/lessons/measurement/").content.decode()
    assert "12.5 tok/s" in html and "15.8 tok/s" in html and "79 %" in html and "/research/runs/7/" in html
    # The request's id is shown to quote; the gateway's TTFT only once the student measured their own.
    assert "d" * 32 in html and "432 ms" not in html and "after your step" in html
    StepDone.objects.create(user=student, step="measure-ttft", evidence="measured")
    assert "432 ms" in client.get("/lessons/measurement/").content.decode()


def test_editor_panel_lists_my_editor_requests(client, student) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    log_request(user=student, key=key, worker=_worker("w1"), user_agent=COPILOT_AGENT, ttft_ms=77)
    client.force_login(student)
    html = client.get("/lessons/editors/").content.decode()
    assert "GitHub Copilot" in html and "77 ms" in html


def test_the_lessons_say_every_api_route_is_served_by_the_lean_path(client, student) -> None:  # noqa: ANN001
    """The API is routed in front of Django (inference/routes.py); asking Django's URL resolver
    said "no (404)" for all seven routes, under the student's own request answered 200."""
    client.force_login(student)
    for page in ("/lessons/control-plane/", "/lessons/api/"):
        html = client.get(page).content.decode()
        assert "/v1/chat/completions" in html, page
        assert "no (404)" not in html, page


def test_a_path_only_the_catch_all_answers_is_not_served() -> None:
    from lessons.panels import route_served

    assert route_served("/v1/messages/count_tokens")
    assert route_served("/ollama/KEY/api/tags")
    assert not route_served("/v1/embeddings")
    assert not route_served("/ollama/KEY/api/pull")
    assert not route_served("/teacher/")
