"""Jobs for a rig's agent on the control plane: queued, delivered once in a heartbeat's answer,
reported back by that rig only; a restarted agent's lost jobs fail; cancels reach the agent."""
from __future__ import annotations

import pytest

from fleet.models import RigJob, Worker
from fleet.rig_jobs import JobRefused, job_cancel, job_request
from fleet.rigs import rig_create
from tests.fleet.test_agent_api import WORKERS, post

pytestmark = pytest.mark.django_db
BEAT = {"gpu_status": "ok", "gpus": [], "workers": []}


@pytest.fixture
def rigs() -> tuple[str, str]:
    """Two registered rigs: rig1 with rig1-a/rig1-b, rig2 with rig2-a. Returns their tokens."""
    from fleet.services import catalog_model_ensure

    catalog_model_ensure(public_id="qwen-7b", context_length=8192)
    _, one = rig_create(name="rig1", address="100.64.0.12")
    _, two = rig_create(name="rig2", address="100.64.0.13")
    assert post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, one).status_code == 200
    other = [{**WORKERS[1], "name": "rig2-a"}]
    assert post("/agent/v1/register", {"agent_version": "v", "workers": other}, two).status_code == 200
    return one, two


def test_a_job_is_delivered_once_in_the_heartbeats_answer_to_its_own_rig_only(rigs) -> None:  # noqa: ANN001
    one, two = rigs
    job = job_request(worker=Worker.objects.get(name="rig1-a"), kind="llama-bench",
                      params={"prompt": [20, 512], "generate": 128})
    assert post("/agent/v1/heartbeat", BEAT, two).json()["jobs"] == []
    answer = post("/agent/v1/heartbeat", BEAT, one).json()
    assert answer["jobs"] == [{"id": job.pk, "kind": "llama-bench", "worker": "rig1-a",
                               "params": {"prompt": [20, 512], "generate": 128}}]
    assert post("/agent/v1/heartbeat", BEAT, one).json()["jobs"] == []  # sent: not again
    job.refresh_from_db()
    assert job.state == "sent" and job.sent_at is not None


def test_only_the_jobs_own_rig_reports_on_it_and_a_finished_job_stays_finished(rigs) -> None:  # noqa: ANN001
    one, two = rigs
    job = job_request(worker=Worker.objects.get(name="rig1-a"), kind="restart", params={"no_warmup": True})
    post("/agent/v1/heartbeat", BEAT, one)
    stolen = post(f"/agent/v1/jobs/{job.pk}", {"state": "failed", "error": "not mine"}, two)
    assert stolen.status_code == 404
    assert post(f"/agent/v1/jobs/{job.pk + 999}", {"state": "done"}, one).status_code == 404
    assert post(f"/agent/v1/jobs/{job.pk}", {"state": "running"}, one).json() == {"id": job.pk, "state": "running"}
    done = post(f"/agent/v1/jobs/{job.pk}", {"state": "done", "result": {"time_to_healthy_s": 1.5}}, one)
    assert done.status_code == 200
    assert post(f"/agent/v1/jobs/{job.pk}", {"state": "failed", "error": "late"}, one).json()["state"] == "done"
    job.refresh_from_db()
    assert (job.state, job.result, job.error) == ("done", {"time_to_healthy_s": 1.5}, "")
    assert job.finished_at is not None
    bad = post(f"/agent/v1/jobs/{job.pk}", {"state": "exploded"}, one)
    assert bad.status_code == 400 and "state" in bad.json()["detail"]
    assert post(f"/agent/v1/jobs/{job.pk}", {"state": "done"}, None).status_code == 401


def test_jobs_lost_with_a_restarted_agent_fail_and_queued_ones_wait(rigs) -> None:  # noqa: ANN001
    one, _ = rigs
    worker = Worker.objects.get(name="rig1-a")
    lost = job_request(worker=worker, kind="llama-bench")
    post("/agent/v1/heartbeat", BEAT, one)
    waiting = job_request(worker=worker, kind="start")
    post("/agent/v1/register", {"agent_version": "v", "workers": WORKERS}, one)
    lost.refresh_from_db()
    waiting.refresh_from_db()
    assert lost.state == "failed" and "restarted" in lost.error
    assert waiting.state == "queued"
    assert [row["id"] for row in post("/agent/v1/heartbeat", BEAT, one).json()["jobs"]] == [waiting.pk]


def test_a_cancel_before_delivery_is_final_and_after_it_reaches_the_agent(rigs) -> None:  # noqa: ANN001
    one, _ = rigs
    worker = Worker.objects.get(name="rig1-a")
    early = job_request(worker=worker, kind="stop")
    job_cancel(early)
    early.refresh_from_db()
    assert early.state == "cancelled"
    running = job_request(worker=worker, kind="llama-bench")
    answer = post("/agent/v1/heartbeat", BEAT, one).json()
    assert [row["id"] for row in answer["jobs"]] == [running.pk]
    job_cancel(running)
    assert post("/agent/v1/heartbeat", BEAT, one).json()["cancel"] == [running.pk]


@pytest.mark.parametrize("kind, params, reason", [
    ("reboot", {}, "unknown job kind"),
    ("llama-bench", {"prompt": "20"}, "prompt must be"),
    ("llama-bench", {"rm": "-rf"}, "unknown parameter 'rm'"),
    ("restart", {"no_warmup": "yes"}, "no_warmup must be"),
    ("llama-bench", {"generate": True}, "generate must be int"),
    ("llama-bench", {"split_mode": ["layer; rm -rf"]}, "split_mode must list"),
    ("llama-bench", {"prompt": [20, "512"]}, "list of numbers"),
    ("restart", {"gpus": [0, 9]}, r"gpus \[0, 9\] are not some of rig1-a's"),  # rig1-a has 0-3
])
def test_a_job_with_an_unknown_kind_or_parameter_is_refused(rigs, kind, params, reason) -> None:  # noqa: ANN001
    with pytest.raises(JobRefused, match=reason):
        job_request(worker=Worker.objects.get(name="rig1-a"), kind=kind, params=params)
    assert not RigJob.objects.exists()


def test_a_worker_no_agent_runs_gets_no_job(rigs) -> None:  # noqa: ANN001
    from fleet.services import worker_register

    by_hand = worker_register(name="by-hand", base_url="http://127.0.0.1:9", model_id="qwen-7b", pool_name="dev")
    with pytest.raises(JobRefused, match="not on a rig"):
        job_request(worker=by_hand, kind="restart")


def test_while_a_run_measures_a_rig_its_agent_is_asked_for_a_reading_every_second(rigs) -> None:  # noqa: ANN001
    from datetime import timedelta

    from django.utils import timezone

    from fleet.models import Rig
    from fleet.rigs import rig_measuring

    one, two = rigs
    assert "heartbeat_s" not in post("/agent/v1/heartbeat", BEAT, one).json()
    rig_measuring(rig_id=Rig.objects.get(name="rig1").pk, for_s=10)
    assert post("/agent/v1/heartbeat", BEAT, one).json()["heartbeat_s"] == 1.0
    assert "heartbeat_s" not in post("/agent/v1/heartbeat", BEAT, two).json()  # the other rig's pace is its own
    Rig.objects.filter(name="rig1").update(measuring_until=timezone.now() - timedelta(seconds=1))
    assert "heartbeat_s" not in post("/agent/v1/heartbeat", BEAT, one).json()  # a run that died stops asking


def test_the_agent_takes_the_pace_the_answer_asks_and_its_own_otherwise() -> None:
    import httpx

    from fleet.agent.config import parse_agent_config
    from fleet.agent.runner import RigAgentRunner

    agent = RigAgentRunner(parse_agent_config(
        '[control_plane]\nurl = "http://127.0.0.1:9"\ntoken = "t"\n[rig]\nname = "r"\naddress = "127.0.0.1"\n'
        'heartbeat_s = 5\n'))
    try:
        assert agent.next_wait_s() == 5
        agent._take_jobs(httpx.Response(200, json={"ok": True, "jobs": [], "cancel": [], "heartbeat_s": 1.0}))
        assert agent.next_wait_s() == 1.0
        agent._take_jobs(httpx.Response(200, json={"ok": True, "heartbeat_s": 0.001}))
        assert agent.next_wait_s() == 0.2  # never a busy loop
        agent._take_jobs(httpx.Response(200, json={"ok": True, "jobs": [], "cancel": []}))
        assert agent.next_wait_s() == 5
    finally:
        agent.stop()
