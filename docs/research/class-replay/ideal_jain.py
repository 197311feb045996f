"""Issue 18's class in the planner's simulator: Jain's index as the gateway gets it, and as the
ideal fair server would on the same turns (research.class_metrics.processor_sharing).

The class of docs/classroom.md (12 students agent:4,claude:2,codex:2,chat:3,burst:1, 180 s, seed 1,
two workers of 4 slots of 4,096 tokens) at scale 0.03 and 0.1, under both fair-sharing rules, each
simulated with 6 step-time noise seeds; the workers' cost model is the eighteenth validation pass's
2x4 calibration (planner-validation/2x4/plan-18.json: this machine's demo workers under a class).
Medians over the seeds. In memory, no database:

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/class-replay/ideal_jain.py > docs/research/class-replay/ideal-jain.txt
"""
import json
import statistics
from dataclasses import replace
from pathlib import Path

from research.class_metrics import Weights, class_report, p50_p95, under_load
from research.class_personas import parse_mix
from research.planner.plan import plan_from_report
from research.planner.sim import FleetPlan, simulate
from research.planner.workload import class_students

HERE = Path(__file__).parent
MIX = "agent:4,claude:2,codex:2,chat:3,burst:1"
SEEDS = 6


def one(policy: str, scale: float, noise_seed: int) -> dict[str, float]:
    saved = json.loads((HERE.parent / "planner-validation" / "2x4" / "plan-18.json").read_text())
    _, cost = plan_from_report(saved["rows"][0]["report"])
    fleet = FleetPlan(workers=2, slots=4, context_tokens=4096, duration_s=180, policy=policy, noise_seed=noise_seed)
    students = class_students(mix=parse_mix(MIX), seed=1, scale=scale, context_tokens=4096, duration_s=180,
                              tools_inline=True, model=fleet.model_id, tokens=cost.tokens)
    turns, duration = simulate(plan=fleet, costs=[cost] * 2, students=students)
    report = class_report(turns, duration_s=duration, weights=Weights(),
                          roster=[(s.name, s.persona) for s in students])
    chat = p50_p95([t.ttft_ms / 1000 for t in under_load(turns) if t.completed and t.ttft_ms is not None])
    return {"turns": report["completed"], "chat_p95": chat["p95"] or 0.0,
            "agent_p95": report["agents"]["ttft_ms"]["p95"] / 1000,
            "jain": report["jain_index"], "jain_rate": report["jain_index_per_backlogged_s"],
            "ideal": report["jain_ideal"]["jain_index"], "ideal_rate": report["jain_ideal"]["jain_index_per_backlogged_s"]}


def main() -> None:
    print(f"class {MIX}, 2 workers x 4 slots, 180 s; medians over {SEEDS} simulated runs")
    print(f"{'scale':>5} {'rule':>9} {'turns':>6} {'chat load p95':>14} {'agent p95':>10} "
          f"{'Jain':>6} {'per s':>6} {'ideal':>6} {'ideal per s':>12}")
    for scale in (0.03, 0.1):
        for policy in ("requests", "tokens"):
            runs = [one(policy, scale, 1000 + i) for i in range(SEEDS)]
            m = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            print(f"{scale:>5} {policy:>9} {m['turns']:>6.0f} {m['chat_p95']:>12.1f} s {m['agent_p95']:>8.1f} s "
                  f"{m['jain']:>6.2f} {m['jain_rate']:>6.2f} {m['ideal']:>6.2f} {m['ideal_rate']:>12.2f}")


if __name__ == "__main__":
    main()
