"""Which configurations should the validation rank? Asked of the planner before any run: every
candidate configuration predicted with the cost models of earlier passes (their committed
`plan-N.json`, read back with research.planner.plan.plan_from_report), for a class given by MIX.
A one-worker candidate takes that pass's 1x4 cost model, a two-worker one its 2x2 model (2x4 its
own): a cost model carries the contention of the workers that share the cores.

A set worth ranking is one whose order, and a clear gap between neighbours, holds under every
cost model tried: the sixteenth pass's choice (planner-validation.md).

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/candidates.py \
        15,14,13,12 agent:6,claude:2,codex:2,chat:4,burst:2
"""
import json
import sys
from dataclasses import replace
from pathlib import Path

from research.class_personas import parse_mix
from research.planner.plan import plan_from_report, predict

HERE = Path(__file__).parent
# name, the configuration whose cost model it takes, workers, slots, context per slot
CANDIDATES = [("1x1", "1x4", 1, 1, 4096), ("1x2", "1x4", 1, 2, 4096), ("1x4", "1x4", 1, 4, 4096),
              ("2x1", "2x2", 2, 1, 4096), ("2x2", "2x2", 2, 2, 4096), ("2x4", "2x4", 2, 4, 2048)]
REPLICATES = 4


def agent_p95(pass_number: str, mix: dict[str, int], candidate: tuple[str, str, int, int, int]) -> float:
    _name, source, workers, slots, context = candidate
    saved = json.loads((HERE / source / f"plan-{pass_number}.json").read_text())["rows"][0]["report"]
    plan, cost = plan_from_report(saved, replicates=REPLICATES)
    plan = replace(plan, mix=mix, fleet=replace(plan.fleet, workers=workers, slots=slots, context_tokens=context))
    return predict(plan, cost)["agents"]["ttft_p95_s_refused_as_infinite"]


def main() -> None:
    passes = sys.argv[1].split(",")
    mix = parse_mix(sys.argv[2])
    print(f"agent TTFT p95 (s), refused turns as infinite; class {sys.argv[2]}; "
          f"{REPLICATES} simulated runs each")
    print(f"{'config':<8}" + "".join(f"{'pass ' + p:>10}" for p in passes))
    table = {c[0]: [agent_p95(p, mix, c) for p in passes] for c in CANDIDATES}
    for name, row in table.items():
        print(f"{name:<8}" + "".join(f"{value:>10.2f}" for value in row))
    for column, pass_number in enumerate(passes):
        ordered = sorted(table, key=lambda name: table[name][column])
        steps = [f"{low} {table[high][column] / table[low][column] - 1:+.0%} {high}"
                 for low, high in zip(ordered, ordered[1:])]
        print(f"pass {pass_number}: " + ", ".join(steps))


if __name__ == "__main__":
    main()
