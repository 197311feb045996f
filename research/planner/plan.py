"""Planning a class: one simulated replay, a sweep over class sizes, and the answer.

The prediction of one configuration is the class replay's JSON (research.class_metrics.class_report
over the simulated turns, `config` beside it), so it compares with a measured replay field by
field; the planner adds to `agents` (the agent personas' turns together) the p95 with refused
turns counted as infinite, and `prediction`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from research.class_metrics import AGENT_PERSONAS, Turn, Weights, class_report
from research.class_personas import PERSONAS
from research.metrics import percentile
from research.planner.cost import CostModel
from research.planner.replicates import mean_report
from research.planner.sim import FleetPlan, simulate
from research.planner.workload import class_students

DEFAULT_REPLICATES = 8
# FleetPlan's gateway settings a prediction's `config` records under their own names, besides
# those the class replay's `config` has too (policy, max_wait_s, cache_type)
GATEWAY_SETTINGS = ("slot_lease_s", "affinity_ttl_s", "light_lane_tokens", "affinity_wait_s",
                    "affinity_wait_tokens", "slot_files", "shared_prefix_k", "lane_workers", "lane_tokens")


def scaled_mix(mix: dict[str, int], students: int) -> dict[str, int]:
    """`mix`'s proportions for a class of `students` (largest remainders, ties in persona order)."""
    total = sum(mix.values())
    if total < 1 or students < 1:
        raise ValueError("a class needs at least one student and a mix naming one")
    exact = {name: count * students / total for name, count in mix.items()}
    counts = {name: math.floor(value) for name, value in exact.items()}
    order = sorted(mix, key=lambda name: (-(exact[name] - counts[name]), PERSONAS.index(name)))
    for name in order[: students - sum(counts.values())]:
        counts[name] += 1
    return {name: count for name, count in counts.items() if count}


def agent_ttft_p95_s(turns: Sequence[Turn]) -> float | None:
    """p95 of the agent personas' time to first token, in seconds, a refused turn counting as
    waiting for ever (so refusing is never a way to meet a target); None without agent turns."""
    values = [math.inf if not t.completed or t.ttft_ms is None else t.ttft_ms / 1000
              for t in turns if t.persona in AGENT_PERSONAS]
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * 0.95
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    if math.isinf(ordered[low]) or (math.isinf(ordered[high]) and rank > low):
        return math.inf
    return percentile(ordered, 95)


@dataclass(frozen=True)
class ClassPlan:
    """Everything one prediction depends on besides the cost model."""

    mix: dict[str, int]
    fleet: FleetPlan
    seed: int = 0
    scale: float = 1.0
    tools_inline: bool = True
    weights: Weights = Weights()
    # Simulated runs averaged (replicates.py), each with step times drawn with the cost model's
    # jitter; 1, or a cost model without jitter: one run, every step exactly its cost.
    replicates: int = DEFAULT_REPLICATES


def _one_run(plan: ClassPlan, cost: CostModel, noise_seed: int | None) -> dict[str, Any]:
    fleet = replace(plan.fleet, noise_seed=noise_seed)
    students = class_students(mix=plan.mix, seed=plan.seed, scale=plan.scale, context_tokens=fleet.context_tokens,
                              duration_s=fleet.duration_s, tools_inline=plan.tools_inline, model=fleet.model_id,
                              tokens=cost.tokens, shares=fleet.shared_prefix_k > 0)
    turns, duration_s = simulate(plan=fleet, costs=[cost] * fleet.workers, students=students)
    workers = [f"worker-{number}" for number in range(1, fleet.workers + 1)]
    report = class_report(turns, duration_s=duration_s, weights=plan.weights,
                          roster=[(s.name, s.persona) for s in students], workers=workers)
    agent_turns = [t for t in turns if t.persona in AGENT_PERSONAS]
    p95 = agent_ttft_p95_s(turns)
    report["agents"] = {
        **report["agents"], "turns": len(agent_turns), "refused": sum(1 for t in agent_turns if not t.completed),
        "ttft_p95_s": None if p95 is None or math.isinf(p95) else p95, "ttft_p95_s_refused_as_infinite": p95,
    }
    return report


def predict(plan: ClassPlan, cost: CostModel, *, calibration: dict[str, Any] | None = None) -> dict[str, Any]:
    """The class replay's JSON, predicted: `class_report` over the simulated turns, with `config`
    as the replay writes it, `agents` (the replay's pooled figures, plus the p95 with refused turns
    counted as infinite) and the `prediction`'s provenance. With replicates (and a cost model with
    jitter), the mean of that many simulated runs, field by field (replicates.mean_report)."""
    fleet = plan.fleet
    runs = plan.replicates if cost.jitter > 0 else 1  # without noise every run is the same one
    if runs > 1:
        report = mean_report([_one_run(plan, cost, noise_seed=plan.seed * 1000 + i) for i in range(runs)])
    else:
        report = _one_run(plan, cost, noise_seed=None)
    report["config"] = {
        "workers": fleet.workers, "slots": fleet.slots, "slots_total": fleet.workers * fleet.slots,
        "context": fleet.context_tokens,
        "worker_list": [{"name": f"worker-{number}", "slots": fleet.slots, "context": fleet.context_tokens}
                        for number in range(1, fleet.workers + 1)],
        "policy": fleet.policy, "policy_applied": True, "policy_note": "simulated with inference.admission.fair_share",
        "weights": plan.weights.as_dict(), "mix": plan.mix, "students": sum(plan.mix.values()),
        "duration_s": fleet.duration_s, "scale": plan.scale, "seed": plan.seed, "tools_inline": plan.tools_inline,
        "model": fleet.model_id, "window_s": 10, "max_wait_s": fleet.max_wait_s,
        "cache_type": fleet.cache_type or cost.cache_type,
        # the rest of the gateway's settings simulated (plan_from_report reads them back)
        **{name: getattr(fleet, name) for name in GATEWAY_SETTINGS},
    }
    report["prediction"] = {"simulator": "research.planner", "cost_model": cost.as_dict(),
                            "calibration": calibration or {},
                            "replicates": max(runs, 1)}
    return report


def plan_from_report(report: dict[str, Any], *, replicates: int = DEFAULT_REPLICATES) -> tuple[ClassPlan, CostModel]:
    """The plan and the cost model a prediction (`predict`'s report) was made with, so that it can
    be simulated again, changed in one respect. A setting a prediction older than GATEWAY_SETTINGS
    did not record takes FleetPlan's default (the site's default)."""
    config = report["config"]
    recorded = {name: config[name] for name in (*GATEWAY_SETTINGS, "max_wait_s") if name in config}
    fleet = FleetPlan(workers=config["workers"], slots=config["slots"], context_tokens=config["context"],
                      duration_s=config["duration_s"], policy=config["policy"], model_id=config["model"],
                      cache_type=config.get("cache_type"), **recorded)
    plan = ClassPlan(mix=config["mix"], fleet=fleet, seed=config["seed"], scale=config["scale"],
                     tools_inline=config["tools_inline"], replicates=replicates,
                     weights=Weights(**(config.get("weights") or {})))
    return plan, CostModel.from_dict(report["prediction"]["cost_model"])


def sweep(plan: ClassPlan, cost: CostModel, sizes: Sequence[int], *,
          calibration: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One prediction per class size, the mix scaled to each (`scaled_mix`)."""
    rows = []
    for size in sizes:
        sized = replace(plan, mix=scaled_mix(plan.mix, size))
        rows.append({"students": size, "report": predict(sized, cost, calibration=calibration)})
    return rows


def largest_class(rows: Sequence[dict[str, Any]], target_p95_s: float) -> int:
    """The largest class size tried such that it and every smaller size tried kept the agents'
    p95 TTFT (refused turns counted as infinite) at or under `target_p95_s`; 0 if the smallest failed."""
    best = 0
    for row in sorted(rows, key=lambda r: r["students"]):
        p95 = row["report"]["agents"]["ttft_p95_s_refused_as_infinite"]
        if p95 is None or p95 > target_p95_s:
            break
        best = row["students"]
    return best
