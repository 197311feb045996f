"""Predict, then measure: a planner's prediction against real class replays. Pure: no Django, no I/O.

Both sides are the class replay's JSON (docs/research/class-replay.md): `plan_class --json`
writes it per class size (under `rows`), `class_replay --json` writes one. The figures compared
are the issue's: TTFT p50 and p95 of the agent personas' turns pooled (`agents`, the same pooled
figure on both sides: research.class_metrics.class_report) and of the chat persona's
(`per_persona.chat`), completed turns only, as the replay reports them.

For each figure, over one prediction and one or more measured runs of the same configuration:

- `ratio` = predicted ÷ the mean of the measured runs (and ÷ each run);
- `spread` = (largest − smallest measured) ÷ their mean: how far apart identical runs land, the
  noise (0 with one run);
- the verdict: `within_bound` when |ratio − 1| ≤ the bound (±25 %), else `within_spread` when
  |ratio − 1| ≤ the spread (the noise is wider than the bound, and the prediction is no further
  from the runs' mean than two identical runs are from each other), else `outside`.

`rank_configurations` orders configurations by agent p95 TTFT, predicted and measured.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

BOUND = 0.25
# (label, where in the report, percentile): "agents" is the pooled agent personas, others a persona
FIGURES: tuple[tuple[str, str, str], ...] = (
    ("agent TTFT p50", "agents", "p50"),
    ("agent TTFT p95", "agents", "p95"),
    ("chat TTFT p50", "chat", "p50"),
    ("chat TTFT p95", "chat", "p95"),
)
RANK_FIGURE = "agent TTFT p95"
# configuration keys a prediction and its measurement must share to be compared
SHARED_CONFIG = ("workers", "slots", "context", "mix", "students", "seed", "scale", "duration_s")


def replay_report(document: Mapping[str, Any], *, students: int | None = None) -> Mapping[str, Any]:
    """The class replay report in `document`: `document` itself (class_replay --json), or the row
    of a plan_class --json sweep for `students` (the only row when `students` is None)."""
    rows = document.get("rows")
    if rows is None:
        if "per_persona" not in document:
            raise ValueError("not a class replay's JSON: no per_persona")
        return document
    if students is None:
        if len(rows) != 1:
            raise ValueError(f"the plan has {len(rows)} class sizes: say which (the measured run's students)")
        return rows[0]["report"]
    for row in rows:
        if row["students"] == students:
            return row["report"]
    raise ValueError(f"the plan has no class of {students} students (it has {[r['students'] for r in rows]})")


def figure_ms(report: Mapping[str, Any], group: str, stat: str) -> float | None:
    """One TTFT percentile, in ms: of the pooled agents (`group` "agents") or of a persona."""
    if group == "agents":
        if "agents" not in report or "ttft_ms" not in report["agents"]:
            raise ValueError("the report has no pooled `agents` TTFT (a class_replay run from before it was added)")
        block = report["agents"]
    else:
        block = (report.get("per_persona") or {}).get(group)
        if block is None:
            return None
    value = (block.get("ttft_ms") or {}).get(stat)
    return None if value is None else float(value)


def config_mismatches(predicted: Mapping[str, Any], measured: Mapping[str, Any]) -> list[str]:
    """The configuration keys on which a prediction and a measured run differ (they must not)."""
    ours, theirs = predicted.get("config") or {}, measured.get("config") or {}
    differences = []
    for key in SHARED_CONFIG:
        a, b = ours.get(key), theirs.get(key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            if not math.isclose(float(a), float(b), rel_tol=1e-9):
                differences.append(f"{key}: predicted {a}, measured {b}")
        elif a != b:
            differences.append(f"{key}: predicted {a}, measured {b}")
    if theirs.get("policy_applied", True) and ours.get("policy") != theirs.get("policy"):
        differences.append(f"policy: predicted {ours.get('policy')}, measured {theirs.get('policy')}")
    return differences


@dataclass(frozen=True)
class FigureCheck:
    """One figure: the prediction, the runs, the ratios, the noise and the verdict."""

    name: str
    predicted_ms: float | None
    measured_ms: tuple[float | None, ...]
    bound: float = BOUND
    mean_ms: float | None = None
    ratio: float | None = None
    run_ratios: tuple[float | None, ...] = ()
    spread: float | None = None
    tolerance: float | None = None
    tolerance_from: str = ""  # "bound" or "spread": whichever is wider
    verdict: str = "no_data"  # within_bound, within_spread, outside, no_data

    @property
    def holds(self) -> bool:
        return self.verdict in {"within_bound", "within_spread"}

    def verdict_text(self) -> str:
        if self.verdict == "within_bound":
            return f"within ±{self.bound:.0%}"
        if self.verdict == "within_spread":
            return f"within the spread (±{self.spread:.0%}, wider than ±{self.bound:.0%})"
        if self.verdict == "outside":
            return f"OUTSIDE (±{self.tolerance:.0%}, from the {self.tolerance_from})"
        return "no data"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "predicted_ms": self.predicted_ms, "measured_ms": list(self.measured_ms),
                "mean_ms": self.mean_ms, "ratio": self.ratio, "run_ratios": list(self.run_ratios),
                "spread": self.spread, "bound": self.bound, "tolerance": self.tolerance,
                "tolerance_from": self.tolerance_from, "verdict": self.verdict, "holds": self.holds,
                "verdict_text": self.verdict_text()}


def check_figure(name: str, predicted_ms: float | None, measured_ms: Sequence[float | None], *,
                 bound: float = BOUND) -> FigureCheck:
    """The verdict on one figure (module docstring). No data when the prediction, or any run, has
    none (a persona without turns), or the runs' mean is not positive."""
    measured = tuple(measured_ms)
    values = [v for v in measured if v is not None]
    if predicted_ms is None or not values or len(values) != len(measured):
        return FigureCheck(name=name, predicted_ms=predicted_ms, measured_ms=measured, bound=bound)
    mean = sum(values) / len(values)
    if mean <= 0:
        return FigureCheck(name=name, predicted_ms=predicted_ms, measured_ms=measured, bound=bound, mean_ms=mean)
    ratio = predicted_ms / mean
    spread = (max(values) - min(values)) / mean
    error = abs(ratio - 1)
    if error <= bound:
        verdict = "within_bound"
    elif error <= spread:
        verdict = "within_spread"
    else:
        verdict = "outside"
    return FigureCheck(
        name=name, predicted_ms=predicted_ms, measured_ms=measured, bound=bound, mean_ms=mean, ratio=ratio,
        run_ratios=tuple(predicted_ms / v if v > 0 else None for v in values), spread=spread,
        tolerance=max(bound, spread), tolerance_from="bound" if bound >= spread else "spread", verdict=verdict)


@dataclass(frozen=True)
class Comparison:
    """One configuration: its figures and what differs between its prediction and its runs."""

    label: str
    figures: tuple[FigureCheck, ...]
    mismatches: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def holds(self) -> bool:
        return all(f.holds for f in self.figures) and not self.mismatches

    def figure(self, name: str) -> FigureCheck:
        return next(f for f in self.figures if f.name == name)

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "holds": self.holds, "figures": [f.as_dict() for f in self.figures],
                "mismatches": list(self.mismatches), "notes": list(self.notes)}


def compare_reports(predicted: Mapping[str, Any], measured: Sequence[Mapping[str, Any]], *, label: str = "",
                    bound: float = BOUND) -> Comparison:
    """The issue's four figures of one configuration: a predicted report against its measured runs."""
    if not measured:
        raise ValueError("no measured run to compare with")
    figures = tuple(check_figure(name, figure_ms(predicted, group, stat),
                                 [figure_ms(run, group, stat) for run in measured], bound=bound)
                    for name, group, stat in FIGURES)
    mismatches: list[str] = []
    for number, run in enumerate(measured, 1):
        mismatches += [f"run {number}: {text}" for text in config_mismatches(predicted, run)]
    notes = []
    for number, run in enumerate(measured, 1):
        refused = (run.get("agents") or {}).get("refused") or 0
        if refused:
            notes.append(f"run {number}: {refused} agent turns refused (not in the TTFT figures)")
    predicted_refused = (predicted.get("agents") or {}).get("refused") or 0
    if predicted_refused:
        notes.append(f"prediction: {predicted_refused} agent turns refused (not in the TTFT figures)")
    return Comparison(label=label, figures=figures, mismatches=tuple(mismatches), notes=tuple(notes))


@dataclass(frozen=True)
class Ranking:
    """Configurations ordered by a figure, best (lowest) first, predicted and measured."""

    figure: str
    predicted: tuple[str, ...]
    measured: tuple[str, ...]
    # pairs whose measured runs overlap: their measured order is inside the noise
    unresolved: tuple[tuple[str, str], ...] = ()
    # every pair, neighbours or not, whose measured runs do not overlap, lower first: the orders
    # the runs establish whatever the noise of two identical runs
    resolved: tuple[tuple[str, str], ...] = ()

    @property
    def same(self) -> bool:
        return self.predicted == self.measured

    @property
    def contradicted(self) -> tuple[tuple[str, str], ...]:
        """The orders the runs establish (`resolved`) that the prediction does not give."""
        where = {label: index for index, label in enumerate(self.predicted)}
        return tuple((low, high) for low, high in self.resolved
                     if low not in where or high not in where or where[low] > where[high])

    def as_dict(self) -> dict[str, Any]:
        return {"figure": self.figure, "predicted": list(self.predicted), "measured": list(self.measured),
                "same": self.same, "unresolved": [list(pair) for pair in self.unresolved],
                "resolved": [list(pair) for pair in self.resolved],
                "contradicted": [list(pair) for pair in self.contradicted]}


def rank_configurations(comparisons: Sequence[Comparison], *, figure: str = RANK_FIGURE) -> Ranking:
    """Orders the configurations by `figure` (agent p95 TTFT), lowest first: by the prediction and
    by the mean of the measured runs; ties keep the given order. A configuration without the
    figure on one side is left out of that side's order. `unresolved` names the neighbours, in the
    measured order, whose measured runs' ranges overlap (two identical runs could swap them);
    `resolved` every pair whose ranges do not (the orders the runs establish)."""
    checks = [(c.label, c.figure(figure)) for c in comparisons]
    predicted = [label for label, check in sorted(
        ((label, check) for label, check in checks if check.predicted_ms is not None),
        key=lambda item: item[1].predicted_ms or 0.0)]
    with_runs = sorted(((label, check) for label, check in checks if check.mean_ms is not None),
                       key=lambda item: item[1].mean_ms or 0.0)
    measured = [label for label, _ in with_runs]
    runs = {label: [v for v in check.measured_ms if v is not None] for label, check in with_runs}
    resolved = [(low, high) for i, low in enumerate(measured) for high in measured[i + 1:]
                if max(runs[low]) < min(runs[high])]
    unresolved = [pair for pair in zip(measured, measured[1:]) if pair not in resolved]
    return Ranking(figure=figure, predicted=tuple(predicted), measured=tuple(measured),
                   unresolved=tuple(unresolved), resolved=tuple(resolved))
