"""Fitting a worker's cost model (research/planner/cost.py) to measured requests. Pure.

Input: the requests of benchmark runs of one worker (research.models.RequestSample, as
`Measured`), each with its run's concurrency. Two least-squares lines:

- **prompt evaluation**, from runs at concurrency 1 (nothing else in the loop):
  TTFT = request_overhead_s + prefill_s_per_token x (prompt tokens - cached tokens).
  A prompt-size sweep spreads the x; cached vs uncached turns of the same prompt lie on the same
  line if cached tokens really cost nothing (the residuals of each group are shown apart).
- **decode**, from every run's median TPOT against its batch (the run's concurrency, at most
  the worker's slots): TPOT = decode_s_per_token + decode_s_per_extra_slot x (batch - 1).
  A closed-loop run at concurrency n also has other requests' prompts in some of its steps,
  which this line folds into the slope; the residuals say how well one line holds.

Missing sweeps are said, not invented: with one prompt size the line goes through the origin
(no overhead); with one concurrency the slope per extra slot is 0. The per-context-token decode
cost is not fitted (0).
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from research.planner.cost import DEFAULT_BATCH_TOKENS, CostModel


@dataclass(frozen=True)
class Measured:
    """One measured request: its run, the run's concurrency, tokens, and times in seconds."""

    run_id: int
    concurrency: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    ttft_s: float | None
    tpot_s: float | None

    @property
    def uncached_tokens(self) -> int:
        return max(self.prompt_tokens - self.cached_tokens, 0)


@dataclass
class Fit:
    cost: CostModel
    prefill_points: int
    decode_points: int
    residuals: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of y = intercept + slope x; through the origin when the x do not vary."""
    if not points:
        raise ValueError("no points to fit")
    xs = [x for x, _ in points]
    if max(xs) - min(xs) <= 0:
        x0 = xs[0]
        mean_y = statistics.fmean(y for _, y in points)
        return 0.0, (mean_y / x0 if x0 else 0.0)
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in points)
             / sum((x - mean_x) ** 2 for x in xs))
    return mean_y - slope * mean_x, slope


def through_origin(points: Sequence[tuple[float, float]]) -> float:
    squares = sum(x * x for x, _ in points)
    return sum(x * y for x, y in points) / squares if squares else 0.0


def _summary(errors: Sequence[float], observed: Sequence[float]) -> dict[str, float | None]:
    if not errors:
        return {"n": 0, "rms_s": None, "max_abs_s": None, "max_relative": None}
    relative = [abs(e) / o for e, o in zip(errors, observed) if o]
    return {"n": len(errors), "rms_s": (sum(e * e for e in errors) / len(errors)) ** 0.5,
            "max_abs_s": max(abs(e) for e in errors), "max_relative": max(relative) if relative else None}


def fit_cost_model(measured: Sequence[Measured], *, slots: int, batch_tokens: int = DEFAULT_BATCH_TOKENS,
                   cache_type: str = "f16") -> Fit:
    """The cost model that best fits `measured` (module docstring); raises ValueError when the
    requests hold neither a TTFT at concurrency 1 nor a TPOT."""
    notes: list[str] = []
    prefill = [m for m in measured if m.concurrency <= 1 and m.ttft_s is not None]
    points = [(float(m.uncached_tokens), float(m.ttft_s)) for m in prefill if m.ttft_s is not None]
    if not points:
        raise ValueError("no request with a TTFT at concurrency 1: run a prompt-size sweep (bench at concurrency 1)")
    overhead, per_token = least_squares(points)
    if len({x for x, _ in points}) < 2:
        notes.append("one prompt size only: no request overhead fitted (the line goes through the origin)")
    if overhead < 0 or per_token <= 0:
        notes.append(f"the prompt line's intercept came out {overhead:.4f} s: refitted through the origin")
        overhead, per_token = 0.0, max(through_origin(points), 0.0)

    by_run: dict[int, list[Measured]] = defaultdict(list)
    for m in measured:
        if m.tpot_s is not None:
            by_run[m.run_id].append(m)
    decode_points = []
    for run_id, requests in sorted(by_run.items()):
        batch = max(1, min(requests[0].concurrency, slots))
        decode_points.append((run_id, batch, statistics.median(m.tpot_s for m in requests if m.tpot_s is not None)))
    if not decode_points:
        raise ValueError("no request with a TPOT (output tokens > 1): runs need at least 2 output tokens")
    base, extra = least_squares([(float(batch - 1), tpot) for _, batch, tpot in decode_points])
    if len({batch for _, batch, _ in decode_points}) < 2:
        notes.append("one batch size only: decode_s_per_extra_slot set to 0 (run a concurrency sweep)")
        base, extra = statistics.fmean(t for _, _, t in decode_points), 0.0
    if extra < 0:
        notes.append(f"decode time per extra slot came out {extra:.5f} s: set to 0")
        base, extra = statistics.fmean(t for _, _, t in decode_points), 0.0
    if base <= 0:
        raise ValueError("the decode line's time per token came out <= 0: the runs' TPOTs do not fit a line")
    notes.append("decode_s_per_context_token not fitted (0)")
    cost = CostModel(prefill_s_per_token=per_token, decode_s_per_token=base, decode_s_per_extra_slot=extra,
                     request_overhead_s=overhead, batch_tokens=batch_tokens, cache_type=cache_type)

    def predicted_ttft(m: Measured) -> float:
        return cost.request_overhead_s + cost.prefill_s_per_token * m.uncached_tokens

    cached = [m for m in prefill if m.cached_tokens > 0]
    uncached = [m for m in prefill if m.cached_tokens <= 0]
    residuals: dict[str, Any] = {
        "ttft": _summary([float(m.ttft_s or 0) - predicted_ttft(m) for m in prefill],
                         [float(m.ttft_s or 0) for m in prefill]),
        "ttft_cached": _summary([float(m.ttft_s or 0) - predicted_ttft(m) for m in cached],
                                [float(m.ttft_s or 0) for m in cached]),
        "ttft_uncached": _summary([float(m.ttft_s or 0) - predicted_ttft(m) for m in uncached],
                                  [float(m.ttft_s or 0) for m in uncached]),
        "tpot": _summary([tpot - cost.decode_s(batch) for _, batch, tpot in decode_points],
                         [tpot for _, _, tpot in decode_points]),
        "tpot_by_run": [{"run": run_id, "batch": batch, "observed_s": tpot, "predicted_s": cost.decode_s(batch)}
                        for run_id, batch, tpot in decode_points],
    }
    return Fit(cost=cost, prefill_points=len(points), decode_points=len(decode_points), residuals=residuals,
               notes=notes)
