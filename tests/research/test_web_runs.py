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
                        "error": ""}
    index = client.get("/research/").content.decode()
    assert "from the page" in index and f"/research/runs/{direct.run.pk}/" in index
