"""The rig forecast's slot file counts (rig-forecast.md, "Over Gen1 x1 risers, slot files cost about
what they save"): for configurations A, B and C at the class sizes where slots change hands, the
handovers' saves and restores the simulation ran (how many, how long, what share of the workers'
loops) and the agents' p95 and cache share with slot files priced at the assumed riser, at 3 GB/s,
free, and turned off (OCS_SLOT_FILES=0). No database: the calibrations are built in memory from
research/planner/assumptions.py, the plans with the site's gateway settings.

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/rig-forecast/slot_files.py
"""
import os
from collections import Counter
from dataclasses import replace

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
import django  # noqa: E402

django.setup()
from research.models import Calibration  # noqa: E402
from research.planner.assumptions import RigAssumptions, assumed_cost  # noqa: E402
from research.planner.cost import CostModel  # noqa: E402
from research.planner.plan import predict, scaled_mix  # noqa: E402
from research.planner_services import class_plan  # noqa: E402

MIX = {"agent": 12, "claude": 6, "codex": 4, "chat": 6, "burst": 2}
RIGS = {  # name: (assumptions as rig-forecast.md's calibrate_worker commands, workers, slots, context, sizes)
    "A": (RigAssumptions(gpus=8, cache_type="q8_0"), 2, 4, 32768, (8, 12)),
    "B": (RigAssumptions(gpus=4, cache_type="q8_0"), 4, 2, 32768, (8, 12)),
    "C": (RigAssumptions(gpus=2, weight_gb=8.4, model_billions=14, kv_bytes_per_token_f16=163840, cache_type="q8_0"),
          8, 2, 24576, (4, 5, 16, 20)),
}
TASKS: Counter = Counter()


class CountingCost(CostModel):
    """The cost model, counting the slot file tasks the simulator asks it to time."""

    def slot_task_s(self, kind: str, tokens: int) -> float:
        seconds = super().slot_task_s(kind, tokens)
        TASKS[kind] += 1
        TASKS[f"{kind}_s"] += seconds
        return seconds


def run(rig: RigAssumptions, workers: int, slots: int, context: int, students: int, *,
        files: bool = True, shared_prefix_k: int = 0, seed: int = 1) -> dict:
    cost, _, _ = assumed_cost(rig)
    plan = class_plan(calibration=Calibration(cost=cost.as_dict()), mix=scaled_mix(MIX, students), workers=workers,
                      slots=slots, context=context, seed=seed)
    plan = replace(plan, fleet=replace(plan.fleet, slot_files=files, shared_prefix_k=shared_prefix_k))
    TASKS.clear()
    report = predict(plan, CountingCost.from_dict(cost.as_dict()))
    p95 = report["agents"]["ttft_p95_s_refused_as_infinite"]
    return {"tasks": dict(TASKS), "p95": p95, "p50": report["agents"]["ttft_ms"]["p50"],
            "refused": report["agents"]["refused"], "cache": report["cache_hit_rate"] or 0.0,
            "completed": report["agents"]["completed"]}


def agents(result: dict) -> str:
    p95 = result["p95"]
    return f"inf ({result['refused']} refused)" if p95 is None or p95 == float("inf") else f"{p95:.1f} s"


def main() -> None:
    print("600 s simulated, seed 1; loop share = save and restore seconds / (workers x 600 s)")
    for name, (rig, workers, slots, context, sizes) in RIGS.items():
        for students in sizes:
            priced = run(rig, workers, slots, context, students)
            tasks = priced["tasks"]
            share = (tasks.get("save_s", 0) + tasks.get("restore_s", 0)) / (workers * 600)
            print(f"{name} {workers}x{slots}, {students} students: saves {tasks.get('save', 0)} "
                  f"({tasks.get('save_s', 0):.0f} s), restores {tasks.get('restore', 0)} "
                  f"({tasks.get('restore_s', 0):.0f} s), loop share {share:.1%}")
            others = {"3 GB/s": run(replace(rig, slot_copy_gbs=3.0), workers, slots, context, students),
                      "free": run(replace(rig, slot_copy_gbs=0.0), workers, slots, context, students),
                      "off": run(rig, workers, slots, context, students, files=False)}
            print(f"   agents p95 / cache: 0.2 GB/s {agents(priced)} {priced['cache']:.0%}; "
                  + "; ".join(f"{label} {agents(r)} {r['cache']:.0%}" for label, r in others.items()))


if __name__ == "__main__":
    main()
