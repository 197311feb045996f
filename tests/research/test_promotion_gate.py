"""The promotion gate: a dev worker joins production only if its latest run meets the SLOs,
and every check is recorded with its numbers and reasons."""
from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from fleet.models import Pool, WorkerEvent
from fleet.services import worker_register
from research.gate import gate_decide
from research.models import BenchmarkRun, PoolSlo, PromotionCheck
from research.services import promotion_check

pytestmark = pytest.mark.django_db


def _run(worker, *, ttft_p90: float, tpot_p90: float, minutes_ago: int = 0,  # noqa: ANN001
         status: str = BenchmarkRun.Status.DONE, prompt_tokens: int = 256, output_tokens: int = 64,
         requests: int = 8) -> BenchmarkRun:
    return BenchmarkRun.objects.create(
        group="g", target="worker", base_url=worker.base_url, worker=worker, model="m", prompt_tokens=prompt_tokens,
        output_tokens=output_tokens, concurrency=1, requests=requests, status=status,
        started_at=timezone.now() - timedelta(minutes=minutes_ago),
        summary={"ttft_ms": {"p90": ttft_p90}, "tpot_ms": {"p90": tpot_p90}},
    )


@pytest.fixture
def dev_worker():  # noqa: ANN201
    return worker_register(name="dev-1", base_url="http://127.0.0.1:9", model_id="m", pool_name="dev",
                           state="healthy")


@pytest.fixture
def production() -> Pool:
    pool, _ = Pool.objects.get_or_create(name="production")
    PoolSlo.objects.create(pool=pool, ttft_p90_ms=2000, tpot_p90_ms=100)
    return pool


def test_gate_refuses_a_run_that_misses_an_slo_and_records_why(dev_worker, production) -> None:  # noqa: ANN001
    _run(dev_worker, ttft_p90=900, tpot_p90=80, minutes_ago=60)  # an older run that met both
    latest = _run(dev_worker, ttft_p90=2500, tpot_p90=80)
    check = promotion_check(worker=dev_worker, pool=production)
    dev_worker.refresh_from_db()
    assert not check.passed and not check.moved
    assert dev_worker.pool.name == "dev"
    assert check.run_id == latest.id
    assert (check.ttft_p90_ms, check.tpot_p90_ms, check.slo_ttft_p90_ms, check.slo_tpot_p90_ms) == (2500, 80, 2000, 100)
    assert check.reasons == ["TTFT p90 2500.0 ms is above the SLO of 2000 ms"]
    assert PromotionCheck.objects.get().reasons == check.reasons


def test_gate_moves_a_worker_whose_latest_run_meets_the_slos(dev_worker, production) -> None:  # noqa: ANN001
    _run(dev_worker, ttft_p90=5000, tpot_p90=500, minutes_ago=60)
    _run(dev_worker, ttft_p90=1500, tpot_p90=100)  # equal to the SLO passes
    check = promotion_check(worker=dev_worker, pool=production)
    dev_worker.refresh_from_db()
    assert check.passed and check.moved and check.reasons == []
    assert dev_worker.pool_id == production.id
    assert WorkerEvent.objects.filter(worker=dev_worker, reason__contains="to production").exists()


def test_gate_refuses_without_a_run_or_without_slos(dev_worker) -> None:  # noqa: ANN001
    pool, _ = Pool.objects.get_or_create(name="production")
    check = promotion_check(worker=dev_worker, pool=pool)
    assert not check.passed
    assert check.reasons == ["the pool has no SLOs set (research: pool SLOs)",
                             "the worker has no benchmark run of the pool's baseline shape"]


def test_gate_refuses_a_failed_latest_run(dev_worker, production) -> None:  # noqa: ANN001
    _run(dev_worker, ttft_p90=10, tpot_p90=10, status=BenchmarkRun.Status.FAILED)
    assert promotion_check(worker=dev_worker, pool=production).reasons == ["the worker's latest run did not finish"]


def test_decision_lists_every_missed_slo() -> None:
    decision = gate_decide(slo_ttft_p90_ms=100, slo_tpot_p90_ms=10, has_run=True, run_ok=True,
                           ttft_p90_ms=150, tpot_p90_ms=None)
    assert decision.reasons == ("TTFT p90 150.0 ms is above the SLO of 100 ms", "TPOT p90 was not measured")


def test_promote_worker_command_prints_the_refusal(dev_worker, production) -> None:  # noqa: ANN001
    _run(dev_worker, ttft_p90=100, tpot_p90=250)
    out = StringIO()
    call_command("promote_worker", "dev-1", stdout=out)
    assert "refused" in out.getvalue() and "TPOT p90 250.0 ms is above the SLO of 100 ms" in out.getvalue()


def test_gate_judges_the_latest_run_of_the_baseline_shape_not_a_later_sweep(dev_worker, production) -> None:  # noqa: ANN001
    baseline = _run(dev_worker, ttft_p90=900, tpot_p90=80, minutes_ago=60)
    _run(dev_worker, ttft_p90=90_000, tpot_p90=400, minutes_ago=10, prompt_tokens=12_000)  # a context sweep
    _run(dev_worker, ttft_p90=50, tpot_p90=5, output_tokens=2)  # a 2-token run
    check = promotion_check(worker=dev_worker, pool=production)
    assert check.passed and check.run_id == baseline.id and check.ttft_p90_ms == 900


def test_gate_refuses_when_no_run_has_the_baseline_shape_and_names_the_latest(dev_worker, production) -> None:  # noqa: ANN001
    sweep = _run(dev_worker, ttft_p90=10, tpot_p90=10, prompt_tokens=12_000)
    _run(dev_worker, ttft_p90=10, tpot_p90=10, requests=2, minutes_ago=5)  # too few requests to judge
    check = promotion_check(worker=dev_worker, pool=production)
    assert not check.passed and check.run_id is None
    assert check.reasons[0] == "the worker has no benchmark run of the pool's baseline shape"
    assert check.reasons[1] == (f"its latest run ({sweep.pk}) is not of the baseline shape 256 in / 64 out, "
                                "concurrency 1, at least 8 requests: 12000 prompt tokens, not 256")


def test_a_pool_declares_its_own_baseline_shape(dev_worker, production) -> None:  # noqa: ANN001
    PoolSlo.objects.filter(pool=production).update(baseline_prompt_tokens=1024, baseline_output_tokens=128,
                                                   baseline_min_requests=4)
    _run(dev_worker, ttft_p90=10, tpot_p90=10)  # the default shape: not this pool's
    agent_shaped = _run(dev_worker, ttft_p90=1500, tpot_p90=90, prompt_tokens=1024, output_tokens=128, requests=4,
                        minutes_ago=30)
    check = promotion_check(worker=dev_worker, pool=production)
    assert check.passed and check.run_id == agent_shaped.id


def test_promote_worker_command_says_which_run_it_judged(dev_worker, production) -> None:  # noqa: ANN001
    run = _run(dev_worker, ttft_p90=100, tpot_p90=50)
    out = StringIO()
    call_command("promote_worker", "dev-1", stdout=out)
    assert f"judged run {run.pk} (concurrency 1, " in out.getvalue() and "passed" in out.getvalue()
