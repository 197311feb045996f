"""The rigs search's result as table rows, terminal lines and a chart (plan_rigs and the "Plan the
rigs" page). Pure: it reads the dict research/planner/rigs.py's `search` returns."""
from __future__ import annotations

import math
from typing import Any

from research.planner.report import seconds_text
from research.svg import Series, line_chart

CHART_CAP_S = 300.0  # an infinite p95 (turns refused) or a longer one is drawn at the cap


def table_rows(result: dict[str, Any], *, top: int | None = None) -> list[dict[str, Any]]:
    """Ranked rows with one cell per class size: the agents' and chat's p95 (None where not
    simulated: the search stops a configuration at its first size that misses a target)."""
    sizes = result["sizes"]
    rows = []
    for rank, row in enumerate(result["rows"][:top] if top else result["rows"], start=1):
        by_size = {s["students"]: s for s in row["sizes"]}
        cells = []
        for students in sizes:
            size = by_size.get(students)
            cells.append({"students": students, "simulated": size is not None,
                          "agents": seconds_text(size["agents_p95_s"]) if size else "",
                          "chat": seconds_text(size["chat_p95_s"]) if size else "",
                          "refused": size["agents_refused"] if size else None,
                          "met": bool(size and size["met"])})
        rows.append({**row, "rank": rank, "cells": cells,
                     "placement": f"{row['workers']} × {row['cards_per_worker']}",
                     "slots_text": f"{row['slots']} × {row['context'] // 1024}k",
                     "prefix": f"k={row['shared_prefix_k']}" if row["shared_prefix_k"] else "off"})
    return rows


def best_per_model(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The best-ranked configuration of each model, in rank order."""
    seen: set[str] = set()
    out = []
    for row in table_rows(result):
        if row["model"] not in seen:
            seen.add(row["model"])
            out.append(row)
    return out


def ranked_lines(result: dict[str, Any], *, top: int = 15) -> list[str]:
    targets = result["targets"]
    sizes = result["sizes"]
    minimum = result["min_context"]
    lines = [f"targets: agents' p95 TTFT <= {targets['agent_p95_s']:g} s (refused turns infinite), chat's p95 <= "
             f"{targets['chat_p95_s']:g} s; {result['duration_s']:g} s simulated, seed {result['seed']}, "
             f"mix {result['mix']}",
             f"context per slot at least {minimum['tokens']:,} ({minimum['persona']}: {minimum['source']})",
             f"{len(result['rows'])} configurations simulated, {len(result['rejected'])} left out (memory, context)",
             "p95 TTFT (s) agents / chat at each class size; '' = not simulated (an earlier size missed a target)",
             f"{'rank':>4} {'model':<12} {'workers x cards':>15} {'slots x ctx':>11} {'KV':>5} {'prefix':>6} "
             + " ".join(f"{n:>13}" for n in sizes) + f" {'served':>6}"]
    for row in table_rows(result, top=top):
        cells = " ".join(f"{(c['agents'] + ' / ' + c['chat']) if c['simulated'] else '':>13}" for c in row["cells"])
        lines.append(f"{row['rank']:>4} {row['model']:<12} {row['placement']:>15} {row['slots_text']:>11} "
                     f"{row['cache_type']:>5} {row['prefix']:>6} {cells} {row['served']:>6}")
    lines.append("best of each model:")
    for row in best_per_model(result):
        lines.append(f"  {row['label']}: {row['served']} students ({row['memory_gb']:.1f} GB a worker)")
    lines.append("rates assumed on one worker (q8_0 KV):")
    for rate in result["rates"]:
        lines.append(f"  {rate['model']}: decode {rate['decode_tok_s']:.1f} tok/s, prompt {rate['prefill_tok_s']:.0f} "
                     f"tok/s on {rate['cards']} card(s)")
    if result.get("measured"):
        lines.append(f"measured calibrations for: {', '.join(result['measured'])}")
    else:
        lines.append("every speed is an assumption (see the page or --json for each source and what replaces it)")
    return lines


def curves_chart(result: dict[str, Any]) -> str:
    """Each model's best configuration: the agents' p95 TTFT against class size (capped)."""
    series = []
    for curve in result["curves"]:
        points = []
        for size in curve["sizes"]:
            value = size["agents_p95_s"]
            if value is None:
                continue
            points.append((float(size["students"]), CHART_CAP_S if math.isinf(value) else min(value, CHART_CAP_S)))
        series.append(Series(name=curve["model"], points=points))
    target = result["targets"]["agent_p95_s"]
    return line_chart(series, title=f"Best configuration of each model: agents' p95 TTFT (target {target:g} s)",
                      x_label="students in the class", y_label=f"p95 TTFT (s; {CHART_CAP_S:g} = refused or more)")
