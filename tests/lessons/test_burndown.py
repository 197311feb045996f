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


REAL_UUID = "GPU-3f1c2a9e-7b4d-4c1e-9a2b-5d6e7f8a9b0c"


def test_workers_deployment_and_gpu_utilization_follow_what_rigs_report() -> None:
    assert states()["workers-1-n"] == "open" and states()["deployment"] == "open"
    rig = _rig()
    first = _worker("rig1-a", rig=rig)
    assert states()["workers-1-n"] == "partial" and states()["deployment"] == "partial"  # no verify_path yet
    second = _worker("rig1-b", rig=rig)
    assert states()["workers-1-n"] == "done"
    second.state = "disabled"
    second.save(update_fields=["state"])
    assert states()["workers-1-n"] == "partial"
    assert first.rig_id == rig.id
    assert states()["gpu-utilization"] == "open"
    fake = Gpu.objects.create(rig=rig, index=0, uuid="GPU-1", utilization_pct=14, sampled_at=timezone.now())
    assert states()["gpu-utilization"] == "rehearsed"  # a fake pynvml's id is not an NVML id
    fake.uuid = REAL_UUID
    fake.save(update_fields=["uuid"])
    assert states()["gpu-utilization"] == "done"
    fake.sampled_at = timezone.now() - timedelta(days=2)
    fake.save(update_fields=["sampled_at"])
    assert states()["gpu-utilization"] == "partial"
    fake.delete()
    assert states()["gpu-utilization"] == "open"


def test_the_deployment_path_needs_a_passing_verify_path_against_a_public_tls_address() -> None:
    from lessons.services import path_verification_record

    path_verification_record(base_url="http://127.0.0.1:8000", passed=True, tls_ok=False, verdict="VERDICT: PASS")
    assert states()["deployment"] == "partial"  # the one-machine demo
    path_verification_record(base_url="https://ai.school.example", passed=False, tls_ok=True, verdict="FAIL")
    assert states()["deployment"] == "partial"
    path_verification_record(base_url="https://100.64.0.5", passed=True, tls_ok=True, verdict="PASS")
    assert states()["deployment"] == "partial"  # a NetBird address is not public
    path_verification_record(base_url="https://ai.school.example", passed=True, tls_ok=True, verdict="PASS")
    assert states()["deployment"] == "done"


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


def test_benchmark_rows_count_runs_by_what_they_measured_not_their_names(monkeypatch) -> None:  # noqa: ANN001
    runs: list[BenchmarkFact] = []
    monkeypatch.setattr(research_bridge, "_load_runs", lambda limit: list(runs))

    def run(scenario: str, measured_on: str = "rig", layout: str = "rig1-a:0,1,2,3", **extra: object) -> BenchmarkFact:
        values = {"run_id": len(runs) + 1, "scenario": scenario, "model": "big", "finished_at": timezone.now(),
                  "ttft_ms_p50": 900.0, "generation_rate": 12.5, "prompt_eval_rate": 80.0,
                  "ceiling_tokens_per_s": 15.8, "url": f"/research/runs/{len(runs) + 1}/",
                  "measured_on": measured_on, "rig": "" if measured_on == "cpu" else "rig1", "layout": layout,
                  "gpu_samples": 0 if measured_on == "cpu" else 8, **extra}
        return BenchmarkFact(**values)  # type: ignore[arg-type]

    rows = ("baseline", "core-numbers", "allocation", "yarn")
    assert {states()[s] for s in rows} == {"open"}
    # CPU-only runs, whatever their scenario, leave every rig row open.
    runs += [run("nightly-baseline", "cpu"), run("allocation", "cpu"), run("allocation", "cpu", layout="x"),
             run("context-sweep", "cpu", yarn=True), run("cold-vs-warm", "cpu")]
    assert {states()[s] for s in rows} == {"open"}
    allocation = next(d.status for d in burndown.deliverables() if d.slug == "allocation")
    assert "2 CPU allocation run(s) (threads, not GPUs) do not count" in allocation.evidence
    # A rehearsal rig: rehearsed, never done.
    runs.append(run("", "rehearsal"))
    assert states()["baseline"] == "rehearsed"
    # A plain `bench` against a rig worker with real NVML samples is a baseline.
    runs.append(run(""))
    assert states()["baseline"] == "done" and states()["core-numbers"] == "partial"  # no cold start yet
    rig = _rig()
    worker = _worker("rig1-a", rig=rig)
    WorkerEvent.objects.create(worker=worker, from_state="starting", to_state="healthy", reason="up", cold_start_s=42)
    assert states()["core-numbers"] == "done"
    assert states()["allocation"] == "partial"  # one layout measured
    runs.append(run("", layout="rig1-a:0,1,2,3,4,5,6"))
    assert states()["allocation"] == "done"
    assert states()["yarn"] == "open"
    runs.append(run("context-sweep", yarn=True))
    assert states()["yarn"] == "done"


def test_every_hint_names_a_command_that_exists() -> None:
    import re

    from django.core.management import get_commands

    from research.scenarios import SCENARIOS

    text = " ".join(rule for _, _, rule, _ in burndown.DERIVED) + " ".join(
        d.status.evidence for d in burndown.deliverables())
    commands = set(re.findall(r"manage\.py (\w+)", text))
    assert commands and commands <= set(get_commands()), commands - set(get_commands())
    assert set(re.findall(r"--scenario ([\w-]+)", text)) <= set(SCENARIOS)
    assert "--scenario baseline" not in text


def test_achieved_is_kept_when_the_live_state_lapses_and_each_day_is_snapshotted(client, teacher) -> None:  # noqa: ANN001
    from lessons.models import BurndownSnapshot, DeliverableAchieved

    rig = _rig()
    Gpu.objects.create(rig=rig, index=0, uuid=REAL_UUID, utilization_pct=30, sampled_at=timezone.now())
    client.force_login(teacher)
    page = client.get("/ground0/").content.decode()
    assert DeliverableAchieved.objects.filter(deliverable="gpu-utilization").exists()
    assert 'id="burndown-history"' in page and BurndownSnapshot.objects.filter(deliverable="gpu-utilization",
                                                                               state="done").exists()
    Gpu.objects.update(sampled_at=timezone.now() - timedelta(days=3))  # the 24-hour window passes
    page = client.get("/ground0/").content.decode()
    row = page.split('id="deliverable-gpu-utilization"', 1)[1].split("</tr>", 1)[0]
    assert row.startswith(' data-state="partial"')  # live now: lapsed
    assert 'data-achieved="yes"' in row
    assert BurndownSnapshot.objects.filter(deliverable="gpu-utilization").count() == 1  # one per day, last look wins
    assert BurndownSnapshot.objects.get(deliverable="gpu-utilization").state == "partial"


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


def test_a_stored_run_is_classified_by_its_worker_rig_and_gpu_samples() -> None:
    from lessons.run_evidence import is_public_https, measured_on
    from research.models import BenchmarkRun, GpuSample

    assert measured_on(rig="", sampled_gpu_uuids=[REAL_UUID]) == "cpu"
    assert measured_on(rig="rig1", sampled_gpu_uuids=[]) == "cpu"
    assert measured_on(rig="rig1", sampled_gpu_uuids=[REAL_UUID, "GPU-1"]) == "rehearsal"
    assert is_public_https("https://ai.school.example") and not is_public_https("http://ai.school.example")
    assert not is_public_https("https://localhost:8443") and not is_public_https("https://10.0.0.5")

    rig = _rig()
    worker = _worker("rig1-a", rig=rig)
    Gpu.objects.create(rig=rig, index=0, uuid=REAL_UUID)
    fields = {"group": "g", "target": "worker", "base_url": worker.base_url, "model": "big", "prompt_tokens": 256,
              "output_tokens": 64, "requests": 20, "status": "done", "launch": {"gpu_indices": [0, 1]}}
    on_rig = BenchmarkRun.objects.create(worker=worker, **fields)
    GpuSample.objects.create(run=on_rig, at=timezone.now(), rig="rig1", gpu_index=0, utilization_pct=40)
    BenchmarkRun.objects.create(scenario="allocation", **fields)  # the CPU stand-in: no worker, no samples
    facts = {fact.run_id: fact for fact in research_bridge.benchmark_runs() or []}
    assert facts[on_rig.id].measured_on == "rig" and facts[on_rig.id].layout == "rig1-a:0,1"
    assert {fact.measured_on for run_id, fact in facts.items() if run_id != on_rig.id} == {"cpu"}


def test_verify_path_records_its_verdict_for_the_burndown() -> None:
    from django.core.management import CommandError, call_command

    from lessons.models import PathVerification

    with pytest.raises(CommandError):
        call_command("verify_path", base_url="http://127.0.0.1:9", api_key="ocs-nothing", timeout=1)
    check = PathVerification.objects.get()
    assert check.base_url == "http://127.0.0.1:9" and not check.passed and not check.tls_ok
    assert check.verdict.startswith("VERDICT: FAIL")


def test_the_teacher_sets_the_team_split_and_everyone_sees_who_owns_what(client, teacher, student) -> None:  # noqa: ANN001
    client.force_login(student)
    assert client.post("/ground0/owners/", {"subject": "baseline", "owner": "me"}).status_code == 403  # not a teacher
    client.force_login(teacher)
    assert client.post("/ground0/owners/", {"subject": "nonsense", "owner": "x"}).status_code == 404
    client.post("/ground0/owners/", {"subject": "baseline", "owner": "Group A (rigs)"})
    client.post("/ground0/owners/", {"subject": "q11", "owner": "Sam"})
    assert AuditEvent.objects.filter(action="ground0_owner_set", subject="q11", actor=teacher).exists()
    client.force_login(student)
    page = client.get("/ground0/").content.decode()
    row = page.split('id="deliverable-baseline"', 1)[1].split("</tr>", 1)[0]
    assert "Group A (rigs)" in row and "<form" not in row
    question = page.split('id="question-q11"', 1)[1].split("</tr>", 1)[0]
    assert "Sam" in question and "split mode" in question.lower()
    client.force_login(teacher)
    client.post("/ground0/owners/", {"subject": "q11", "owner": ""})
    assert "Sam" not in client.get("/ground0/").content.decode().split('id="question-q11"', 1)[1].split("</tr>", 1)[0]


def test_each_burndown_cell_sits_under_its_own_heading(client, teacher) -> None:  # noqa: ANN001
    """The owner box sat under "Achieved" and the achieved "—" under "Owner"."""
    import re

    client.force_login(teacher)
    page = client.get("/ground0/").content.decode()
    table = page[page.index('id="burndown"'):page.index("</table>", page.index('id="burndown"'))]
    headings = re.findall(r'<th scope="col">([^<]+)</th>', table)
    row = table[table.index("<tr id=\"deliverable-"):]
    row = row[:row.index("</tr>")]
    cells = re.findall(r'<td(?: class="(\w+)")?', row)
    assert headings[2:4] == ["Achieved", "Owner"]
    assert cells[1:3] == ["achieved", "owner"]
