"""A sweep's rows as a table and a chart (for plan_class and the "Plan a class" page). Pure."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from research.svg import Series, line_chart


def p95_s(report: dict[str, Any], persona: str) -> float | None:
    """A persona's p95 TTFT in seconds (completed turns, as the replay reports it)."""
    value = ((report["per_persona"].get(persona) or {}).get("ttft_ms") or {}).get("p95")
    return None if value is None else value / 1000


def sweep_table(rows: Sequence[dict[str, Any]], personas: Sequence[str]) -> list[dict[str, Any]]:
    """Per class size: p95 TTFT (s) per persona, the agents' p95 (refused = infinite), refused turns, cache hits."""
    table = []
    for row in rows:
        report = row["report"]
        agents = report["agents"]["ttft_p95_s_refused_as_infinite"]
        table.append({"students": row["students"], "p95_s": [p95_s(report, p) for p in personas],
                      "agents_p95_s": agents, "agents_refused": report["agents"]["refused"],
                      "refused": report["refused"], "turns": report["turns"],
                      "cache_hit_rate": report.get("cache_hit_rate")})
    return table


def seconds_text(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.1f}"


def sweep_chart(rows: Sequence[dict[str, Any]], personas: Sequence[str], *, title: str) -> str:
    series = []
    for persona in personas:
        points = [(float(row["students"]), p95) for row in rows
                  if (p95 := p95_s(row["report"], persona)) is not None]
        series.append(Series(name=persona, points=points))
    return line_chart(series, title=title, x_label="students in the class", y_label="p95 TTFT (s)")
