"""The lessons read benchmark runs the way the research app stores them."""
from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from lessons import research_bridge
from lessons.research_bridge import _fact

SUMMARY = {"ttft_ms": {"p50": 1812.0, "p90": 2400.0, "p99": 2600.0, "mean": 1900.0}, "generation_rate": 12.5,
           "prompt_eval_rate": 10.85, "output_throughput": 12.1,
           "roofline": {"ceiling_tok_s": 15.8, "percent_of_ceiling": 79.1, "split_mode": "layer", "gpus": 7}}


def test_a_stored_run_becomes_a_fact() -> None:
    ended = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    run = SimpleNamespace(pk=12, scenario="context-sweep", model="big", started_at=ended, ended_at=ended,
                          summary=SUMMARY, launch={"argv": ["-c", "16384", "--rope-scaling", "yarn"], "slots": 1})
    fact = _fact(run)
    assert (fact.run_id, fact.scenario, fact.model, fact.finished_at) == (12, "context-sweep", "big", ended)
    assert (fact.ttft_ms_p50, fact.generation_rate, fact.prompt_eval_rate) == (1812.0, 12.5, 10.85)
    assert fact.ceiling_tokens_per_s == 15.8 and round(fact.percent_of_ceiling or 0) == 79
    assert fact.url == "/research/runs/12/" and fact.yarn


def test_missing_numbers_read_as_none() -> None:
    fact = _fact(SimpleNamespace(pk=1, scenario="", model="m", summary={"ttft_ms": None}, launch={"slots": 4}))
    assert fact.ttft_ms_p50 is None and fact.generation_rate is None and fact.ceiling_tokens_per_s is None
    assert fact.percent_of_ceiling is None and not fact.yarn and fact.finished_at is None


@pytest.mark.django_db
def test_the_latest_finished_run_from_the_research_app() -> None:
    models = pytest.importorskip("research.models")
    if not hasattr(models, "BenchmarkRun"):
        pytest.skip("the research app's BenchmarkRun is not in this branch yet (research instrument issue)")
    run_model = models.BenchmarkRun
    common = {"group": "g1", "target": "worker", "base_url": "http://127.0.0.1:9", "model": "m",
              "prompt_tokens": 256, "output_tokens": 64, "requests": 8}
    done = run_model.objects.create(**common, scenario="nightly-baseline", status="done", summary=SUMMARY)
    run_model.objects.create(**common, scenario="allocation", status="running", summary={})
    latest = research_bridge.latest_benchmark()
    assert latest is not None and latest.run_id == done.pk and latest.generation_rate == 12.5
