"""A predict-then-measure check as rows (research.models.PlannerCheck and its figures). Pure.

A check is planner_check's result (research/planner/compare.py: `{"bound", "configurations":
[Comparison.as_dict()], "ranking"}`), the configurations it judged, the machine's noise per
configuration, the command that reproduces it and a one-sentence finding. The twenty passes of
docs/research/planner-validation.md are stored in the same shape in `HISTORY` (read from their raw
files, which left the repository: every figure rebuilt and compared with their check-N.json before
they went), loaded by migration 0015.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

HISTORY = Path(__file__).resolve().parents[2] / "data" / "planner_checks.json"
VERDICTS = ("within_bound", "within_spread", "outside", "no_data")
HOLDING = {"within_bound", "within_spread"}
# the configuration keys a check keeps (the rest of a replay's config is the run's, not the class's)
CONFIG_KEYS = ("workers", "slots", "context", "students", "mix", "seed", "scale", "duration_s", "policy")


def history(path: Path = HISTORY) -> list[dict[str, Any]]:
    """The passes imported from docs/research/planner-validation/ as it was at 0ae48b8 (one dict a
    check, oldest first)."""
    return list(json.loads(path.read_text()))


def import_checks(apps: Any, entries: list[dict[str, Any]]) -> None:
    """A data migration's forward step: each entry (planner_check's record) as a PlannerCheck row
    and its figures, replacing a check of the same name."""
    check_model = apps.get_model("research", "PlannerCheck")
    figure_model = apps.get_model("research", "PlannerCheckFigure")
    for entry in entries:
        fields = check_fields(entry)
        check, _ = check_model.objects.update_or_create(name=fields.pop("name"), defaults=fields)
        check.figures.all().delete()
        figure_model.objects.bulk_create(figure_model(planner_check=check, **row)
                                         for row in figure_rows(entry["comparison"]))


def remove_checks(apps: Any, entries: list[dict[str, Any]]) -> None:
    """Its backward step."""
    apps.get_model("research", "PlannerCheck").objects.filter(name__in=[e["name"] for e in entries]).delete()


def figure_rows(comparison: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per configuration and figure, in the order planner_check printed them."""
    rows: list[dict[str, Any]] = []
    for configuration in comparison.get("configurations") or []:
        for figure in configuration.get("figures") or []:
            verdict = figure.get("verdict") or "no_data"
            if verdict not in VERDICTS:
                raise ValueError(f"{configuration.get('label')} {figure.get('name')}: unknown verdict {verdict!r}")
            rows.append({"position": len(rows), "configuration": str(configuration.get("label") or ""),
                         "figure": str(figure.get("name") or ""), "predicted_ms": figure.get("predicted_ms"),
                         "measured_ms": list(figure.get("measured_ms") or []), "mean_ms": figure.get("mean_ms"),
                         "ratio": figure.get("ratio"), "spread": figure.get("spread"), "verdict": verdict})
    return rows


def counts(comparison: Mapping[str, Any]) -> tuple[int, int]:
    """(figures within the bound or the spread, figures)."""
    rows = figure_rows(comparison)
    return sum(1 for row in rows if row["verdict"] in HOLDING), len(rows)


def configuration_of(label: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration as a check keeps it: its label and the class's keys of a replay's `config`."""
    return {"label": label, **{key: config.get(key) for key in CONFIG_KEYS}}


def check_fields(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The PlannerCheck fields of one check (an entry of HISTORY, or what planner_check builds);
    each configuration keeps its notes, mismatches and turns beside its class."""
    comparison = entry["comparison"]
    within, total = counts(comparison)
    judged = {c.get("label"): c for c in comparison.get("configurations") or []}
    configurations = []
    for config in entry.get("configurations") or []:
        extra = judged.get(config.get("label")) or {}
        kept = {key: extra[key] for key in ("notes", "mismatches", "turns") if key in extra}
        configurations.append({**config, **kept})
    return {"name": entry["name"], "title": entry.get("title") or "", "measured_on": entry.get("measured_on"),
            "source": entry.get("source") or "run", "bound": float(comparison.get("bound") or 0.25),
            "configurations": configurations, "noise": dict(entry.get("noise") or {}),
            "ranking": dict(comparison.get("ranking") or {}), "figures_within": within, "figures_total": total,
            "reproduce": entry.get("reproduce") or "", "finding": entry.get("finding") or ""}


def _span(values: Sequence[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)}–{fmt.format(high)}"


def noise_text(noise: Mapping[str, Mapping[str, Any]]) -> str:
    """The machine's noise over a check's configurations in a few words: the step jitter (relative
    SD of a step's time), the load factor (speed under a class from the warm-up), each replay's
    speed against the calibration and the drift probes; '' when none was measured."""
    def values(key: str) -> list[float]:
        found: list[float] = []
        for per_config in noise.values():
            value = per_config.get(key)
            found += [float(v) for v in value] if isinstance(value, list) else [] if value is None else [float(value)]
        return found

    parts = []
    if jitter := values("jitter"):
        parts.append(f"step jitter {_span([100 * v for v in jitter], '{:.1f}')} %")
    if load := values("load_factor"):
        parts.append(f"load factor ×{_span(load, '{:.2f}')}")
    if speed := values("speed"):
        parts.append(f"replays at ×{_span(speed, '{:.2f}')} of the calibration")
    if drift := values("drift"):
        parts.append(f"drift probes ×{_span(drift, '{:.2f}')}")
    return ", ".join(parts)


def configurations_text(configurations: Iterable[Mapping[str, Any]]) -> str:
    """'2x4, 1x4, 1x2 · 24 students, seed 3' (the class of the first configuration)."""
    configurations = list(configurations)
    if not configurations:
        return ""
    first = configurations[0]
    labels = ", ".join(str(c.get("label")) for c in configurations)
    return f"{labels} · {first.get('students')} students, seed {first.get('seed')}"
