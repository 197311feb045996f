"""Lesson 2's path lab: the site runs verify_path for the student against this deployment, shows
every check, and the step is done only when the student names exactly the private checks of
their own run and says why a worker must refuse a laptop."""
from __future__ import annotations

import pytest
from django.conf import settings

from lessons.path_lab import (
    HOPS,
    WORKER_ADDRESS,
    LabInputError,
    check_explanation,
    grade,
    hide_addresses,
    hops_asked,
    open_workers,
    shown_order,
)

STEP = "/lessons/netbird/steps/check-the-path/"
REASON = ("A laptop that reaches a worker skips the gateway: no key check, no limits or fair share, and no "
          "usage is logged.")
RUN = [{"hop": "public TLS", "target": "h:80", "outcome": "SKIP"},
       {"hop": "public", "target": "/healthz", "outcome": "PASS"},
       {"hop": "public", "target": "/readyz", "outcome": "PASS"},
       {"hop": "key", "target": "/v1/models", "outcome": "PASS"},
       {"hop": "worker /health (private)", "target": "w1", "outcome": "PASS"},
       {"hop": "worker key (private)", "target": "w1", "outcome": "PASS"},
       {"hop": "worker stream (private)", "target": "w1", "outcome": "PASS"},
       {"hop": "gateway -> worker stream", "target": "w1", "outcome": "WARN"},
       {"hop": "worker /health (private)", "target": "w2", "outcome": "PASS"},
       {"hop": "worker key (private)", "target": "w2", "outcome": "WARN"},
       {"hop": "live state", "target": "REDIS_URL", "outcome": "WARN"},
       {"hop": "ollama", "target": "/ollama/[redacted]/api/tags", "outcome": "PASS"}]
PRIVATE = {"worker-health", "worker-fence", "worker-stream"}


def test_each_hop_is_asked_once_and_only_the_ones_a_student_can_reason_about() -> None:
    hops = hops_asked(RUN)
    assert [hop.id for hop in hops] == ["tls", "probes", "key", "worker-health", "worker-fence", "worker-stream",
                                        "via-gateway", "ollama"]
    assert {hop.id for hop in hops if hop.private} == PRIVATE
    # The label shown never gives the answer away (verify_path's own names say "(private)").
    assert not any("private" in hop.label.lower() or "public" in hop.label.lower() for hop in HOPS.values())
    assert open_workers(RUN) == ["w2"]


def test_the_order_is_the_students_own_and_stable() -> None:
    hops = hops_asked(RUN)
    orders = {tuple(hop.id for hop in shown_order(hops, user_id=uid)) for uid in range(1, 30)}
    assert len(orders) > 5 and all(sorted(order) == sorted(h.id for h in hops) for order in orders)
    assert shown_order(hops, user_id=7) == shown_order(hops, user_id=7)


def test_grading_wants_exactly_the_private_checks() -> None:
    hops = hops_asked(RUN)
    assert grade(hops, PRIVATE)[0]
    right, said = grade(hops, PRIVATE | {"via-gateway"})  # through the gateway is the public address
    assert not right
    assert "went to this site's public address: one streamed answer per worker, through the gateway" in said
    right, said = grade(hops, {"worker-health"})
    assert not right and "2 private checks not ticked" in said
    assert not grade(hops, set())[0]
    # A run that reached no worker has nothing private to name: it cannot be passed.
    right, said = grade(hops_asked(RUN[:4]), set())
    assert not right and "reached no worker" in said


def test_workers_addresses_never_reach_the_student() -> None:
    run = [{"hop": "worker /health (private)", "target": "w1", "outcome": "FAIL",
            "detail": "http://100.64.0.12:8080: ConnectError: [Errno 111] connecting to 100.64.0.12:8080"},
           {"hop": "public", "target": "/healthz", "outcome": "PASS", "detail": "200 ok from http://127.0.0.1:8000"}]
    hidden = hide_addresses(run, ["http://100.64.0.12:8080/", "http://127.0.0.1:8081"])
    assert "100.64.0.12" not in str(hidden) and hidden[0]["detail"].count(WORKER_ADDRESS) == 2
    assert hidden[1]["detail"] == "200 ok from http://127.0.0.1:8000"  # the site's own address stays
    assert run[0]["detail"].startswith("http://100.64")  # the run's own rows are not changed


def test_the_reason_must_say_what_a_laptop_would_skip() -> None:
    assert check_explanation("  " + REASON) == REASON
    for weak in ("because security", "Because it is not secure and the teacher said so, that is all.",
                 "The gateway is the door to the workers and is on the public internet somewhere."):
        with pytest.raises(LabInputError, match="which part of the system would that request skip"):
            check_explanation(weak)


@pytest.mark.integration
def test_a_student_runs_the_path_check_and_names_the_private_hops(client, student, worker, gateway) -> None:  # noqa: ANN001
    from accounts.models import ApiKey
    from core.redact import KEY_PATTERN
    from lessons.models import PathLab, StepDone
    from lessons.path_runs import path_lab_execute

    client.force_login(student)
    page = client.get("/lessons/netbird/").content.decode()
    assert 'id="step-check-the-path"' in page and 'id="run-check-the-path"' in page
    early = client.post(STEP, {"explanation": REASON}, follow=True).content.decode()
    assert "Run the path check first" in early

    client.post(STEP, {"action": "run"}, HTTP_HOST="127.0.0.1:19599")  # a forged Host changes nothing
    lab = PathLab.objects.get(user=student)
    assert lab.status == PathLab.Status.QUEUED and lab.base_url == settings.OCS_RUNS_BASE_URL
    again = client.post(STEP, {"action": "run"}, follow=True).content.decode()
    assert "still running" in again and PathLab.objects.count() == 1  # one run at a time
    assert "still running" in client.post(STEP, {"private_hop": list(PRIVATE)}, follow=True).content.decode()

    # What the task cluster does with it; here against the session's gateway, as the test
    # client's own address is not served.
    PathLab.objects.filter(pk=lab.pk).update(base_url=gateway.url)
    assert path_lab_execute(lab.pk) == PathLab.Status.DONE
    assert path_lab_execute(lab.pk) == PathLab.Status.DONE  # delivered twice: checked once
    lab.refresh_from_db()
    outcomes = {(r["hop"], r["target"]): r["outcome"] for r in lab.results}
    assert outcomes[("worker /health (private)", "it-worker")] == "PASS"
    assert outcomes[("worker key (private)", "it-worker")] == "PASS"  # it refuses without its key
    assert outcomes[("key", "/v1/models")] == "PASS"  # the run's key was the student's, in their pool
    run_key = ApiKey.objects.get(user=student, name=f"path-lab-{lab.pk}")
    assert run_key.revoked_at is not None
    assert KEY_PATTERN.search(str(lab.results)) is None and "[redacted]" in str(lab.results)  # as verify_path prints

    page = client.get("/lessons/netbird/").content.decode()
    assert worker.base_url.split("://")[1].rstrip("/") not in page + str(lab.results) + lab.verdict
    assert 'id="path-lab-checks"' in page and "(private)" not in page.split('id="path-lab-checks"')[1][:4000]
    wrong = client.post(STEP, {"private_hop": ["worker-health", "via-gateway"], "explanation": REASON},
                        follow=True).content.decode()
    assert "Not yet:" in wrong and "public address: one streamed answer per worker, through the gateway" in wrong
    assert not StepDone.objects.filter(user=student, step="check-the-path").exists()
    terse = client.post(STEP, {"private_hop": list(PRIVATE), "explanation": "security"}, follow=True).content.decode()
    assert "Right:" in terse and not StepDone.objects.filter(user=student, step="check-the-path").exists()
    lab.refresh_from_db()
    assert sorted(lab.private_picked) == sorted(PRIVATE) and lab.explanation == "security"  # every answer kept

    client.post(STEP, {"private_hop": list(PRIVATE), "explanation": REASON})
    done = StepDone.objects.get(user=student, step="check-the-path")
    assert f"verify_path against {gateway.url}" in done.evidence and "skips the gateway" in done.evidence
