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


def plan_sentence(table: Sequence[dict[str, Any]], *, target_p95_s: float) -> str:
    """The planner's answer for a teacher, in one sentence: the largest class tried whose agents
    get their first answer within the target 95 times in 100, how long they wait then, and from
    which size some turns are refused (sweep_table's rows)."""
    rows = sorted(table, key=lambda row: row["students"])
    if not rows:
        return "No class size was simulated."
    fitting = []
    for row in rows:
        waits = row["agents_p95_s"]
        if waits is None or waits > target_p95_s:
            break
        fitting.append(row)
    refused_from = next((row["students"] for row in rows if row["refused"]), None)
    if fitting:
        best = fitting[-1]
        answer = (f"With this set-up a class of {best['students']} waits about {best['agents_p95_s']:.0f} s at worst "
                  f"(95 times in 100) for an agent's first answer, within your {target_p95_s:g} s")
    else:
        first = rows[0]
        wait = first["agents_p95_s"]
        answer = (f"With this set-up even a class of {first['students']} waits longer than your {target_p95_s:g} s "
                  + ("for an agent's first answer" if wait is None or math.isinf(wait)
                     else f"(about {wait:.0f} s at worst, 95 times in 100) for an agent's first answer"))
    if refused_from is not None:
        return answer + f"; from {refused_from} students some turns are refused after waiting too long."
    return answer + f"; no turn is refused up to {rows[-1]['students']} students."


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
