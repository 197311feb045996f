"""Turns `bench --json` reports into Markdown tables and SVG plots for docs/research/ (pure: no
Django; the latency histograms take the samples as plain lists)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from research import svg

Level = dict[str, Any]


def _num(value: Any, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def inter_chunk_latency(level: Level) -> dict[str, Any]:
    """The level's pooled inter-chunk gaps; reports written before the rename call them `itl_ms`."""
    return level.get("inter_chunk_latency_ms") or level.get("itl_ms") or {}


def levels_table(levels: Sequence[Level]) -> str:
    """One Markdown row per level: the numbers the results doc compares."""
    head = ("| level | ok | TTFT p50 / p90 (ms) | TPOT p50 / p90 (ms) | inter-chunk p90 (ms) | E2E p90 (ms) | req/s "
            "| output tok/s | server gen tok/s | server prompt tok/s | goodput (req/s) |")
    rows = [head, "|" + "---|" * 11]
    for level in levels:
        rows.append(
            f"| {level.get('label', '')} | {level['completed']}/{level['requests']} "
            f"| {_num(level['ttft_ms']['p50'], 0)} / {_num(level['ttft_ms']['p90'], 0)} "
            f"| {_num(level['tpot_ms']['p50'])} / {_num(level['tpot_ms']['p90'])} "
            f"| {_num(inter_chunk_latency(level).get('p90'))} | {_num(level['e2e_ms']['p90'], 0)} "
            f"| {_num(level['request_throughput'], 2)} | {_num(level['output_throughput'])} "
            f"| {_num(level.get('generation_rate'))} | {_num(level.get('prompt_eval_rate'))} "
            f"| {_num(level.get('goodput'), 2)} |"
        )
    return "\n".join(rows)


ENGINE_COLUMNS_LEFT_OUT = ("command", "pp_tok_s", "tg_tok_s", "wall_s", "tool", "build")


def results_table(rows: Sequence[dict[str, Any]], *, leave_out: Sequence[str] = ()) -> str:
    """A scenario's own rows (cold starts, prefix reuse) as a Markdown table, keys as columns."""
    if not rows:
        return ""
    keys = [k for k in rows[0] if not isinstance(rows[0][k], (dict, list)) and k not in leave_out]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = [(_num(row.get(k), 1) if isinstance(row.get(k), float) else str(row.get(k, ""))) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def throughput_vs_load(levels: Sequence[Level], *, title: str, x_of: str = "concurrency") -> str:
    """Output tokens/s (everyone) and server generation tok/s (one request) against the load."""
    total = [(float(level[x_of]), float(level["output_throughput"])) for level in levels if level.get(x_of)]
    per_request = [(float(level[x_of]), float(level["generation_rate"])) for level in levels
                   if level.get(x_of) and level.get("generation_rate") is not None]
    return svg.line_chart([svg.Series("output, all requests", total), svg.Series("per request (server)", per_request)],
                          title=title, x_label=x_of, y_label="tokens/s")


def tpot_vs_load(levels: Sequence[Level], *, title: str, x_of: str = "concurrency") -> str:
    series = [svg.Series(f"TPOT {stat}", [(float(level[x_of]), float(level["tpot_ms"][stat])) for level in levels
                                          if level.get(x_of) and level["tpot_ms"][stat] is not None])
              for stat in ("p50", "p90")]
    return svg.line_chart(series, title=title, x_label=x_of, y_label="ms per output token")


def ttft_vs_prompt(levels: Sequence[Level], *, title: str) -> str:
    """TTFT p50 against the measured prompt length, one line per configuration (plain, YaRN)."""
    lines: dict[str, list[tuple[float, float]]] = {}
    for level in levels:
        name = "YaRN x2 (ctx 16,384)" if "yarn" in str(level.get("label", "")) else "native (ctx 8,192)"
        if level.get("prompt_tokens_mean") and level["ttft_ms"]["p50"] is not None:
            lines.setdefault(name, []).append((float(level["prompt_tokens_mean"]), float(level["ttft_ms"]["p50"])))
    return svg.line_chart([svg.Series(k, sorted(v)) for k, v in lines.items()], title=title,
                          x_label="prompt tokens", y_label="TTFT p50 (ms)")


def latency_histogram(values_ms: Sequence[float], *, title: str, level: Level, key: str) -> str:
    marks = [(stat, level[key][stat]) for stat in ("p50", "p90") if level[key][stat] is not None]
    return svg.histogram(values_ms, title=title, x_label="milliseconds", bins=min(20, max(len(values_ms), 1)),
                         marks=marks)
