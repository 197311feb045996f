"""Replicates of one prediction, averaged. Pure.

A class at the load the validation runs sits near the knee of its queue: two real runs of the
same class (same seed, same think times) differ by 20-60 % in their p95s, because each step's
time varies a little and the queue amplifies it (docs/research/planner-validation.md). One
simulated trajectory is one such run; the planner's prediction is the mean over replicates whose
step times are drawn with the worker's measured spread (CostModel.jitter, sim.FleetPlan.noise_seed):
what a run can be expected to measure, not one run's luck.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def mean_value(values: Sequence[Any]) -> Any:
    """The mean of one field over the replicates: numbers averaged (ints rounded back to int),
    None left out (None if all are), dicts and equal-length lists field by field (a key missing
    from some replicates, such as a refusal reason, is averaged over those that have it), anything
    else (text, lists whose length differs between replicates) the first replicate's."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    first = present[0]
    if isinstance(first, bool) or not all(isinstance(v, type(first)) or _number(v) and _number(first)
                                          for v in present):
        return first
    if _number(first):
        mean = statistics.fmean(float(v) for v in present)
        return round(mean) if all(isinstance(v, int) for v in present) else mean
    if isinstance(first, dict):
        keys = list(first) + [k for v in present[1:] for k in v if k not in first]
        return {key: mean_value([v.get(key) for v in present]) for key in keys}
    if isinstance(first, list) and all(len(v) == len(first) for v in present):
        return [mean_value([v[i] for v in present]) for i in range(len(first))]
    return first


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def mean_report(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The replicates' reports averaged field by field (mean_value), with `replicates`: how many,
    and per persona (and the agents pooled) each replicate's TTFT p50 and p95 in ms, their spread."""
    if not reports:
        raise ValueError("no replicate to average")
    merged = mean_value(list(reports))
    personas = sorted({name for report in reports for name in report.get("per_persona", {})})
    spread: dict[str, Any] = {"agents": [((r.get("agents") or {}).get("ttft_ms") or {}) for r in reports]}
    for persona in personas:
        spread[persona] = [((r["per_persona"].get(persona) or {}).get("ttft_ms") or {}) for r in reports]
    merged["replicates"] = {"count": len(reports), "ttft_ms": spread}
    return merged
