"""/ground0/: every status follows its evidence as it is added and removed."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import AuditEvent
from accounts.services import key_issue
from fleet.models import Gpu, Rig, WorkerEvent
from fleet.services import worker_register
from lessons import burndown, research_bridge
from lessons.research_bridge import BenchmarkFact
from tests.lessons.helpers import COPILOT_AGENT, log_request

pytestmark = pytest.mark.django_db


def states() -> dict[str, str]:
    return {d.slug: d.status.state for d in burndown.deliverables()}


def _rig(name: str = "rig1") -> Rig:
    return Rig.objects.create(name=name, address="100.64.0.12", token_prefix=name, token_hash="h",
                              last_heartbeat_at=timezone.now(), agent_version="ocs-agent/1")


def _worker(name: str, rig: Rig | None = None, state: str = "healthy"):  # noqa: ANN202
    worker = worker_register(name=name, base_url="http://100.64.0.12:8080", model_id="m", pool_name="production",
                             state=state)
    if rig is not None:
        worker.rig = rig
        worker.save(update_fields=["rig"])
    return worker


def test_with_no_evidence_everything_is_open() -> None:
    everything = states()
    assert everything.pop("summary") == "partial"  # docs/ground0.md exists, nobody has finished
    assert set(everything.values()) == {"open"}


def test_copilot_path_follows_copilot_requests_this_week_on_a_rig(student) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    local, on_rig = _worker("local"), _worker("rig1-a", rig=_rig())
    log_request(user=student, key=key, worker=on_rig, user_agent=COPILOT_AGENT, at=timezone.now() - timedelta(days=8))
    assert states()["copilot-path"] == "open"  # last week's request is not this week's evidence
    curl = log_request(user=student, key=key, worker=on_rig, user_agent="curl/8.5.0")
    assert states()["copilot-path"] == "partial"  # an OpenAI-route request reached a rig
    curl.delete()
    assert states()["copilot-path"] == "open"
    elsewhere = log_request(user=student, key=key, worker=local, user_agent=COPILOT_AGENT)
    assert states()["copilot-path"] == "partial"
    row = log_request(user=student, key=key, worker=on_rig, client="ollama",
                      path="/ollama/<redacted>/v1/chat/completions", user_agent="")
    status = next(d.status for d in burndown.deliverables() if d.slug == "copilot-path")
    assert status.state == "done" and status.link == f"/admin/inference/requestlog/{row.id}/change/"
    row.delete()
    elsewhere.delete()
    assert states()["copilot-path"] == "open"


def test_workers_deployment_and_gpu_utilization_follow_what_rigs_report() -> None:
    assert states()["workers-1-n"] == "open" and states()["deployment"] == "open"
    rig = _rig()
    first = _worker("rig1-a", rig=rig)
    assert states()["workers-1-n"] == "partial" and states()["deployment"] == "done"
    second = _worker("rig1-b", rig=rig)
    assert states()["workers-1-n"] == "done"
    second.state = "disabled"
    second.save(update_fields=["state"])
    assert states()["workers-1-n"] == "partial"
    Rig.objects.filter(id=rig.id).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    assert states()["deployment"] == "partial"  # the rig went silent
    assert first.rig_id == rig.id
    assert states()["gpu-utilization"] == "open"
    gpu = Gpu.objects.create(rig=rig, index=0, utilization_pct=14, sampled_at=timezone.now())
    assert states()["gpu-utilization"] == "done"
    gpu.sampled_at = timezone.now() - timedelta(days=2)
    gpu.save(update_fields=["sampled_at"])
    assert states()["gpu-utilization"] == "partial"
    gpu.delete()
    assert states()["gpu-utilization"] == "open"


def test_health_and_failover_need_a_recovery_and_a_failed_over_request(student) -> None:  # noqa: ANN001
    worker = _worker("w1")
    down = WorkerEvent.objects.create(worker=worker, from_state="healthy", to_state="down", reason="2 failed probes")
    assert states()["health-failover"] == "partial"
    WorkerEvent.objects.create(worker=worker, from_state="down", to_state="healthy", reason="2 good probes",
                               at=down.at + timedelta(seconds=5))
    assert states()["health-failover"] == "partial"
    key, _ = key_issue(user=student)
    row = log_request(user=student, key=key, worker=worker, retries=1)
    assert states()["health-failover"] == "done"
    row.delete()
    assert states()["health-failover"] == "partial"
    WorkerEvent.objects.all().delete()
    assert states()["health-failover"] == "open"


def test_benchmark_deliverables_follow_the_research_runs(monkeypatch) -> None:  # noqa: ANN001
    runs: list[BenchmarkFact] = []
    monkeypatch.setattr(research_bridge, "_load_runs", lambda limit: list(runs))

    def run(scenario: str, **extra: object) -> BenchmarkFact:
        values = {"run_id": len(runs) + 1, "scenario": scenario, "model": "big", "finished_at": timezone.now(),
                  "ttft_ms_p50": 900.0, "generation_rate": 12.5, "prompt_eval_rate": 80.0,
                  "ceiling_tokens_per_s": 15.8, "url": f"/research/runs/{len(runs) + 1}/", **extra}
        return BenchmarkFact(**values)  # type: ignore[arg-type]

    assert {states()[s] for s in ("baseline", "core-numbers", "allocation", "yarn")} == {"open"}
    runs.append(run("nightly-baseline"))
    assert states()["baseline"] == "done" and states()["core-numbers"] == "partial"
    runs.append(run("cold-vs-warm"))
    assert states()["core-numbers"] == "done"
    runs.append(run("allocation"))
    assert states()["allocation"] == "partial"
    runs.append(run("allocation"))
    assert states()["allocation"] == "done"
    runs.append(run("context-sweep", yarn=False))
    assert states()["yarn"] == "open"  # long context without YaRN is not the YaRN deliverable
    runs.append(run("context-sweep", yarn=True))
    assert states()["yarn"] == "done"
    runs.clear()
    assert {states()[s] for s in ("baseline", "core-numbers", "allocation", "yarn")} == {"open"}


def test_a_manual_check_names_who_ticked_it_and_when(client, teacher, student) -> None:  # noqa: ANN001
    client.force_login(student)
    assert client.post("/ground0/contracts/tick/", {"note": "sneaky"}).status_code == 403
    client.force_login(teacher)
    client.post("/ground0/contracts/tick/", {"note": "reviewed on Monday"})
    page = client.get("/ground0/").content.decode()
    row = page.split('id="deliverable-contracts"', 1)[1].split("</tr>", 1)[0]
    assert 'data-state="done"' in row and "ticked by teacher on" in row and "reviewed on Monday" in row
    assert AuditEvent.objects.filter(action="ground0_tick", actor=teacher, subject="contracts").exists()
    client.post("/ground0/contracts/tick/", {"action": "untick"})
    assert states()["contracts"] == "open"
    assert AuditEvent.objects.filter(action="ground0_untick", actor=teacher).exists()
    assert client.post("/ground0/copilot-path/tick/").status_code == 404  # derived statuses cannot be ticked


def test_students_see_the_burndown_without_admin_links(client, student, teacher) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    log_request(user=student, key=key, worker=_worker("rig1-a", rig=_rig()), user_agent=COPILOT_AGENT)
    client.force_login(student)
    page = client.get("/ground0/").content.decode()
    assert 'id="deliverable-copilot-path" data-state="done"' in page and "/admin/" not in page
    client.force_login(teacher)
    assert "/admin/inference/requestlog/" in client.get("/ground0/").content.decode()
