"""A prediction averaged over replicates whose step times are drawn with the worker's jitter."""
from __future__ import annotations

import dataclasses

import pytest

from research.class_personas import parse_mix
from research.planner.cost import CostModel
from research.planner.plan import ClassPlan, predict
from research.planner.replicates import mean_report, mean_value
from research.planner.sim import FleetPlan

pytestmark = pytest.mark.backend_neutral  # pure: no database, no live state

COST = CostModel(prefill_s_per_token=0.004, decode_s_per_token=0.02, decode_s_per_extra_slot=0.004,
                 request_overhead_s=0.05)


def test_fields_average_numbers_keep_ints_and_skip_missing_values() -> None:
    assert mean_value([1, 2, 4]) == 2  # ints stay ints (a count of turns)
    assert mean_value([1.0, 2.0, None]) == pytest.approx(1.5)
    assert mean_value([None, None]) is None
    assert mean_value([{"p95": 2.0, "who": "a"}, {"p95": 4.0, "who": "b"}]) == {"p95": 3.0, "who": "a"}
    assert mean_value([[1.0, 3.0], [3.0, 5.0]]) == [2.0, 4.0]
    assert mean_value([[1.0], [3.0, 5.0]]) == [1.0]  # lengths differ: the first replicate's
    assert mean_value([True, False]) is True
    with pytest.raises(ValueError):
        mean_report([])


def plan(replicates: int) -> ClassPlan:
    fleet = FleetPlan(workers=2, slots=2, context_tokens=4096, duration_s=60.0, policy="tokens")
    return ClassPlan(mix=parse_mix("agent:2,chat:1,burst:1"), fleet=fleet, seed=3, scale=0.03, replicates=replicates)


def test_replicates_average_runs_drawn_with_the_workers_jitter_and_keep_each_runs_figures() -> None:
    noisy = dataclasses.replace(COST, jitter=0.2)
    report = predict(plan(4), noisy)
    assert report["prediction"]["replicates"] == 4
    runs = report["replicates"]["ttft_ms"]["agents"]
    assert len(runs) == 4 and len({round(r["p95"], 6) for r in runs}) > 1  # the noise made them differ
    assert report["agents"]["ttft_ms"]["p95"] == pytest.approx(sum(r["p95"] for r in runs) / 4)
    assert report == predict(plan(4), noisy)  # seeded: the same prediction twice
    # no jitter: one exact run, whatever the replicates asked
    exact = predict(plan(4), COST)
    assert exact["prediction"]["replicates"] == 1 and "replicates" not in exact
    assert exact["agents"] == predict(plan(1), COST)["agents"]
