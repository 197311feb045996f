"""Predict-then-measure on hand-made numbers: ratios, the runs' spread, the verdicts and the
ranking (research/planner/compare.py), and `planner_check` reading the two JSON shapes. Pure but
for the command: no database, no server."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from research.planner.compare import (check_figure, compare_reports, config_mismatches, figure_ms,
                                      rank_configurations, replay_report)

CONFIG = {"workers": 2, "slots": 2, "context": 4096, "mix": {"agent": 2, "chat": 1}, "students": 3, "seed": 1,
          "scale": 0.03, "duration_s": 150.0, "policy": "tokens", "policy_applied": False}


def report(agent: tuple[float, float], chat: tuple[float, float] | None, **config: Any) -> dict[str, Any]:
    """A replay report with agent and chat TTFT p50 / p95 in seconds."""
    per_persona: dict[str, Any] = {"agent": {"ttft_ms": {"p50": agent[0] * 1000, "p95": agent[1] * 1000}}}
    if chat is not None:
        per_persona["chat"] = {"ttft_ms": {"p50": chat[0] * 1000, "p95": chat[1] * 1000}}
    return {"per_persona": per_persona, "config": {**CONFIG, **config},
            "agents": {"ttft_ms": {"p50": agent[0] * 1000, "p95": agent[1] * 1000}, "refused": 0}}


def test_a_prediction_within_a_quarter_of_the_runs_mean_holds() -> None:
    check = check_figure("agent TTFT p95", 11_000, [10_000, 10_000])
    assert check.ratio == pytest.approx(1.1) and check.spread == 0
    assert check.verdict == "within_bound" and check.holds
    assert check.run_ratios == (pytest.approx(1.1), pytest.approx(1.1))


def test_a_prediction_off_by_more_than_the_bound_and_the_noise_fails() -> None:
    # the runs agree within 10 %; the prediction is 40 % low: outside both
    check = check_figure("agent TTFT p95", 6_000, [9_500, 10_500])
    assert check.ratio == pytest.approx(0.6)
    assert check.spread == pytest.approx(0.1)
    assert check.verdict == "outside" and not check.holds
    assert check.tolerance == pytest.approx(0.25) and check.tolerance_from == "bound"
    assert check.verdict_text().startswith("OUTSIDE")


def test_where_the_runs_disagree_more_than_the_bound_the_spread_is_the_tolerance() -> None:
    # two identical runs: 6 s and 14 s (spread 80 % of their 10 s mean); 15 s is 50 % high
    check = check_figure("chat TTFT p95", 15_000, [6_000, 14_000])
    assert check.spread == pytest.approx(0.8)
    assert check.verdict == "within_spread" and check.tolerance_from == "spread"
    assert "spread" in check.verdict_text()
    # ... but not a prediction further out than the spread
    assert check_figure("chat TTFT p95", 19_000, [6_000, 14_000]).verdict == "outside"


def test_exactly_on_the_bound_holds() -> None:
    assert check_figure("x", 12_500, [10_000]).verdict == "within_bound"
    assert check_figure("x", 7_500, [10_000]).verdict == "within_bound"


def test_no_data_when_a_side_has_no_turns() -> None:
    assert check_figure("chat TTFT p50", None, [1_000, 2_000]).verdict == "no_data"
    assert check_figure("chat TTFT p50", 1_000, [1_000, None]).verdict == "no_data"
    assert not check_figure("chat TTFT p50", 1_000, []).holds


def test_the_four_figures_of_a_configuration() -> None:
    predicted = report((2.0, 8.0), (1.0, 3.0))
    measured = [report((2.1, 9.0), (1.2, 3.0)), report((1.9, 11.0), (1.0, 3.2))]
    comparison = compare_reports(predicted, measured, label="2x2")
    assert [f.name for f in comparison.figures] == ["agent TTFT p50", "agent TTFT p95", "chat TTFT p50",
                                                    "chat TTFT p95"]
    assert comparison.figure("agent TTFT p50").ratio == pytest.approx(1.0)
    assert comparison.figure("agent TTFT p95").ratio == pytest.approx(0.8)
    assert comparison.holds and not comparison.mismatches
    # the agents are the pooled figure, not a persona's
    pooled = report((2.0, 8.0), None)
    pooled["agents"]["ttft_ms"]["p95"] = 20_000
    assert figure_ms(pooled, "agents", "p95") == 20_000 and figure_ms(pooled, "chat", "p95") is None


def test_one_figure_outside_fails_the_configuration() -> None:
    comparison = compare_reports(report((2.0, 4.0), (1.0, 3.0)), [report((2.0, 10.0), (1.0, 3.0))])
    assert comparison.figure("agent TTFT p95").verdict == "outside"
    assert not comparison.holds


def test_a_prediction_of_another_configuration_is_flagged() -> None:
    assert config_mismatches(report((1, 1), None), report((1, 1), None, seed=1)) == []
    differences = config_mismatches(report((1, 1), None), report((1, 1), None, slots=4, duration_s=120))
    assert differences == ["slots: predicted 2, measured 4", "duration_s: predicted 150.0, measured 120"]
    # a policy the replay could not set is not held against it; one it set is
    assert config_mismatches(report((1, 1), None), report((1, 1), None, policy="requests")) == []
    assert config_mismatches(report((1, 1), None), report((1, 1), None, policy="requests", policy_applied=True))
    comparison = compare_reports(report((1, 1), (1, 1)), [report((1, 1), (1, 1), workers=1)])
    assert comparison.mismatches and not comparison.holds


def test_the_ranking_by_agent_p95_predicted_and_measured() -> None:
    cases = {"1x4": ((3.0, 30.0), (30.0, 34.0)), "2x2": ((2.0, 20.0), (18.0, 19.0)),
             "2x4": ((1.0, 10.0), (12.0, 17.0))}
    comparisons = [compare_reports(report((1, p95), None), [report((1, m), None) for m in runs], label=label)
                   for label, ((_, p95), runs) in cases.items()]
    ranking = rank_configurations(comparisons)
    assert ranking.predicted == ("2x4", "2x2", "1x4") and ranking.measured == ("2x4", "2x2", "1x4")
    assert ranking.same and ranking.unresolved == ()
    assert ranking.resolved == (("2x4", "2x2"), ("2x4", "1x4"), ("2x2", "1x4")) and ranking.contradicted == ()
    # swap the measured order of two: not the same; and overlapping runs are named
    comparisons[1] = compare_reports(report((1, 20.0), None), [report((1, 9.0), None), report((1, 13.0), None)],
                                     label="2x2")
    ranking = rank_configurations(comparisons)
    assert ranking.measured == ("2x2", "2x4", "1x4") and not ranking.same
    assert ranking.unresolved == (("2x2", "2x4"),)
    # the swapped pair overlaps, so the runs do not establish it: what they do establish is predicted
    assert ranking.resolved == (("2x2", "1x4"), ("2x4", "1x4")) and ranking.contradicted == ()
    # runs apart beyond their spread, in the order the prediction reverses: contradicted
    comparisons[1] = compare_reports(report((1, 20.0), None), [report((1, 5.0), None), report((1, 6.0), None)],
                                     label="2x2")
    ranking = rank_configurations(comparisons)
    assert ("2x2", "2x4") in ranking.resolved and ranking.contradicted == (("2x2", "2x4"),)
    assert ranking.as_dict()["contradicted"] == [["2x2", "2x4"]]


def test_a_plan_sweep_gives_the_row_of_the_measured_class_size() -> None:
    plan = {"rows": [{"students": 3, "report": report((1, 2), None)}, {"students": 6, "report": report((5, 9), None)}]}
    assert figure_ms(replay_report(plan, students=6), "agents", "p95") == 9000
    with pytest.raises(ValueError):
        replay_report(plan)  # two sizes, none named
    with pytest.raises(ValueError):
        replay_report(plan, students=4)
    with pytest.raises(ValueError):
        figure_ms({"per_persona": {}}, "agents", "p50")  # a replay from before the pooled figure


def test_planner_check_prints_ratios_verdicts_and_the_ranking(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    def write(name: str, document: dict[str, Any]) -> str:
        path = tmp_path / name
        path.write_text(json.dumps(document))
        return str(path)

    plan_a = write("plan-a.json", {"rows": [{"students": 3, "report": report((2.0, 8.0), (1.0, 3.0))}]})
    plan_b = write("plan-b.json", {"rows": [{"students": 3, "report": report((4.0, 16.0), (1.0, 3.0))}]})
    runs_a = ",".join(write(f"a{n}.json", report((2.0, 8.0 + n), (1.0, 3.0))) for n in (1, 2))
    runs_b = ",".join(write(f"b{n}.json", report((4.0, 40.0 + n), (1.0, 3.0))) for n in (1, 2))
    out = tmp_path / "check.json"
    call_command("planner_check", "--case", f"a:{plan_a}:{runs_a}", "--case", f"b:{plan_b}:{runs_b}",
                 "--json", str(out))
    printed = capsys.readouterr().out
    assert "agent TTFT p95" in printed and "OUTSIDE" in printed and "the same order" in printed
    assert "figures within the bound or the spread: 7 of 8" in printed
    result = json.loads(out.read_text())
    assert result["ranking"]["same"] is True
    assert [c["holds"] for c in result["configurations"]] == [True, False]
