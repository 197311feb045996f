"""Runs started from the web (/research/start/): staff only, bounded sizes, and a real run
measured by the runs task cluster (a real `qcluster` with OCS_TASK_CLUSTER=runs) against a real
llama-server, straight and through the gateway, stored and shown on /research/."""
from __future__ import annotations

import pytest

from research.web_runs import RunAsk, WebRunRefused, check_ask
from tests.conftest import wait_for


def test_sizes_outside_the_bounds_are_refused_with_what_is_allowed() -> None:
    check_ask(RunAsk(worker_id=1, via_gateway=False, prompt_tokens=256, output_tokens=64, requests=8, concurrency=1))
    with pytest.raises(WebRunRefused, match="requests must be between 1 and 500"):
        check_ask(RunAsk(worker_id=1, via_gateway=False, prompt_tokens=256, output_tokens=64, requests=0,
                         concurrency=1))
    with pytest.raises(WebRunRefused, match="concurrency must be between 1 and 64"):
        check_ask(RunAsk(worker_id=1, via_gateway=False, prompt_tokens=256, output_tokens=64, requests=8,
                         concurrency=500))
    baseline = dict(worker_id=1, via_gateway=False, prompt_tokens=20, output_tokens=64, requests=8, concurrency=4,
                    what="baseline")
    check_ask(RunAsk(**baseline, idle_s=(60, 300, 900), max_context=8192))
    with pytest.raises(WebRunRefused, match="idle gaps"):
        check_ask(RunAsk(**baseline, idle_s=(86_400,)))  # a day of nothing ties up the runs cluster
    with pytest.raises(WebRunRefused, match="largest sweep prompt"):
        check_ask(RunAsk(**baseline, max_context=8))
    with pytest.raises(WebRunRefused, match="one load level or the rig baseline"):
        check_ask(RunAsk(**{**baseline, "what": "everything"}))


@pytest.mark.django_db
def test_only_staff_start_runs_and_bad_input_is_a_message_not_an_error(client, teacher, student) -> None:  # noqa: ANN001
    from fleet.services import worker_register
    from research.models import WebRun

    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy")
    form = {"worker": worker.pk, "prompt_tokens": 64, "output_tokens": 8, "requests": 2, "concurrency": 1}
    assert client.get("/research/start/").status_code == 302  # signed out: to the sign-in page
    client.force_login(student)
    assert client.get("/research/start/").status_code == 403
    assert client.post("/research/start/", form).status_code == 403
    assert not WebRun.objects.exists()
    client.force_login(teacher)
    page = client.get("/research/start/").content.decode()
    assert 'id="start-run"' in page and "w1 (m, production, healthy)" in page
    for bad, message in (({**form, "requests": "many"}, "whole number"), ({**form, "worker": 99999}, "Pick one"),
                         ({**form, "output_tokens": 100000}, "output tokens must be between")):
        answer = client.post("/research/start/", bad, follow=True)
        assert answer.status_code == 200 and message in answer.content.decode()
    assert not WebRun.objects.exists()
    assert client.get("/research/start/12345/").status_code == 404


@pytest.mark.django_db
def test_a_forged_host_header_changes_nothing_a_web_run_does(client, teacher, settings) -> None:  # noqa: ANN001
    from fleet.services import worker_register
    from research.models import WebRun

    settings.OCS_RUNS_BASE_URL = "http://127.0.0.1:8123"
    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy")
    client.force_login(teacher)
    answer = client.post("/research/start/", {"worker": worker.pk, "prompt_tokens": 64, "output_tokens": 8,
                                              "requests": 2, "concurrency": 1, "via_gateway": "on"},
                         HTTP_HOST="127.0.0.1:19599")  # a listener of the teacher's choosing
    assert answer.status_code == 302
    assert WebRun.objects.get().gateway_url == "http://127.0.0.1:8123"


@pytest.mark.integration
def test_a_run_started_from_the_page_is_measured_by_the_runs_cluster_and_shows_on_research(
        client, teacher, worker, gateway, runs_cluster) -> None:  # noqa: ANN001
    from accounts.models import ApiKey
    from research.models import BenchmarkRun, WebRun
    from research.web_runs import web_run_start

    client.force_login(teacher)
    answer = client.post("/research/start/", {"worker": worker.pk, "prompt_tokens": 48, "output_tokens": 8,
                                              "requests": 3, "concurrency": 2, "label": "from the page"})
    direct = WebRun.objects.get(label="from the page")
    assert answer.status_code == 302 and answer["Location"] == f"/research/start/{direct.pk}/"
    # Through the gateway (the page would give its own address; the test client's is not served).
    via = web_run_start(ask=RunAsk(worker_id=worker.pk, via_gateway=True, prompt_tokens=48, output_tokens=8,
                                   requests=2, concurrency=1, label="via the gateway"),
                        by=teacher, gateway_url=gateway.url)

    def finished() -> bool:
        return not WebRun.objects.filter(status__in=[WebRun.Status.QUEUED, WebRun.Status.RUNNING]).exists()

    assert wait_for(finished, timeout_s=180, interval_s=0.5), runs_cluster.read_text()[-3000:]
    direct.refresh_from_db()
    via.refresh_from_db()
    for web_run, requests in ((direct, 3), (via, 2)):
        assert web_run.status == WebRun.Status.DONE, (web_run.error, runs_cluster.read_text()[-3000:])
        assert (web_run.done_requests, web_run.total_requests) == (requests + 1, requests + 1)  # + the warm-up
        assert web_run.run is not None and web_run.run.status == BenchmarkRun.Status.DONE
        assert web_run.run.summary["completed"] == requests
    assert direct.run.target == BenchmarkRun.Target.WORKER and direct.run.worker_id == worker.pk
    assert via.run.target == BenchmarkRun.Target.GATEWAY
    run_key = ApiKey.objects.get(user=teacher, name=f"web-run-{via.pk}")
    assert run_key.revoked_at is not None  # the run's key lived for the run only

    progress = client.get(f"/research/start/{direct.pk}/progress.json").json()
    assert progress == {"id": direct.pk, "status": "done", "done": 4, "total": 4, "run_id": direct.run.pk,
                        "baseline_id": None, "error": ""}
    index = client.get("/research/").content.decode()
    assert "from the page" in index and f"/research/runs/{direct.run.pk}/" in index


@pytest.mark.integration
def test_a_rig_baseline_started_from_the_page_runs_every_step_through_the_agent(
        client, teacher, gateway, runs_cluster, transactional_db) -> None:  # noqa: ANN001
    """The baseline from the web (issue 19): the runs cluster runs rig_baseline against a worker a
    real rig agent supervises; the page shows it step by step and links the stored baseline."""
    from fleet.models import Worker
    from research.models import Baseline, WebRun
    from tests.integration.test_rig_agent import agent_in_a_loop

    client.force_login(teacher)
    with agent_in_a_loop(gateway.url) as agent:
        worker = Worker.objects.get(name="cpu-1")
        refused = client.post("/research/start/", {"worker": worker.pk, "what": "baseline", "via_gateway": "on",
                                                   "prompt_tokens": 16, "output_tokens": 4, "requests": 1,
                                                   "concurrency": 2}, follow=True)
        assert "not through the gateway" in refused.content.decode() and not WebRun.objects.exists()
        answer = client.post("/research/start/", {"worker": worker.pk, "what": "baseline", "prompt_tokens": 16,
                                                  "output_tokens": 4, "requests": 1, "concurrency": 2,
                                                  "idle": "0.1", "max_context": 64, "label": "web baseline"})
        web_run = WebRun.objects.get(label="web baseline")
        assert answer.status_code == 302 and web_run.total_requests == 9  # steps, not requests

        def finished() -> bool:
            web_run.refresh_from_db()
            return web_run.status not in (WebRun.Status.QUEUED, WebRun.Status.RUNNING)

        assert wait_for(finished, timeout_s=300, interval_s=0.5), runs_cluster.read_text()[-3000:]
        assert web_run.status == WebRun.Status.DONE, (web_run.error, runs_cluster.read_text()[-3000:])
        assert not agent.supervisors[0].held
    baseline = Baseline.objects.get()
    assert web_run.baseline_id == baseline.pk and baseline.status == "done"
    assert [step["kind"] for step in baseline.steps] == ["engine", "cold", "idle", "warm", "concurrency",
                                                         "prompt-size", "context", "speculative", "allocation"]
    assert baseline.steps[1]["result"]["first_generation"] is True
    assert sorted(baseline.runs.filter(baseline_kind="concurrency").values_list("concurrency", flat=True)) == [1, 2]
    assert baseline.runs.filter(baseline_kind="context").get().prompt_tokens == 64
    progress = client.get(f"/research/start/{web_run.pk}/progress.json").json()
    assert (progress["done"], progress["total"], progress["baseline_id"]) == (9, 9, baseline.pk)
    page = client.get(f"/research/baselines/{baseline.pk}/").content.decode()
    assert "the measured request was the worker's first generation" in page and 'data-kind="engine"' in page
    assert f"/research/baselines/{baseline.pk}/" in client.get(f"/research/start/{web_run.pk}/").content.decode()
