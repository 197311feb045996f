"""Small server-side SVG charts (no JavaScript, no CDN): line charts and histograms.

Pure functions returning SVG markup; every text is escaped. Axes start at zero on y so ratios
read truthfully; x runs from the smallest to the largest x given.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 28, 44


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]


def nice_max(value: float) -> float:
    """The next 1, 2, 2.5 or 5 x 10^k at or above `value` (> 0), for a clean top gridline."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10**exponent
        if candidate >= value * (1 - 1e-9):
            return float(candidate)
    return float(10 ** (exponent + 1))


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _frame(title: str, x_label: str, y_label: str, y_top: float, x_min: float, x_max: float,
           x_ticks: Sequence[float]) -> list[str]:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    for i in range(5):
        value = y_top * i / 4
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(value)}</text>')
    span = (x_max - x_min) or 1.0
    for tick in x_ticks:
        x = LEFT + plot_w * (tick - x_min) / span
        parts.append(f'<line x1="{x:.1f}" y1="{TOP + plot_h}" x2="{x:.1f}" y2="{TOP + plot_h + 4}" stroke="#333"/>')
        parts.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{_fmt(tick)}</text>')
    parts += [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#333"/>',
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="14" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.1f})">{escape(y_label)}</text>',
    ]
    return parts


def _x_ticks(x_min: float, x_max: float, xs: Sequence[float]) -> list[float]:
    distinct = sorted(set(xs))
    if len(distinct) <= 8:
        return distinct
    return [x_min + (x_max - x_min) * i / 5 for i in range(6)]


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str, markers: bool = True) -> str:
    """One line per series; an empty chart says so instead of drawing nothing."""
    points = [p for s in series for p in s.points]
    if not points:
        return empty_chart(title)
    xs = [x for x, _ in points]
    x_min, x_max = min(xs), max(xs)
    y_top = nice_max(max(y for _, y in points))
    parts = _frame(title, x_label, y_label, y_top, x_min, x_max, _x_ticks(x_min, x_max, xs))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = (x_max - x_min) or 1.0
    for number, one in enumerate(series):
        color = PALETTE[number % len(PALETTE)]
        coords = [(LEFT + plot_w * (x - x_min) / span if x_max > x_min else LEFT + plot_w / 2,
                   TOP + plot_h - plot_h * y / y_top) for x, y in one.points]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        if markers or len(coords) == 1:
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in coords]
        legend_y = TOP + 14 * number + 8
        parts.append(f'<rect x="{WIDTH - RIGHT + 10}" y="{legend_y - 8}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{WIDTH - RIGHT + 24}" y="{legend_y + 1}">{escape(one.name[:22])}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def histogram(values: Sequence[float], *, title: str, x_label: str, bins: int = 20,
              marks: Sequence[tuple[str, float]] = ()) -> str:
    """Counts of `values` in `bins` equal bins, with labelled vertical marks (e.g. p50, p90)."""
    if not values:
        return empty_chart(title)
    low, high = min(values), max(values)
    if high == low:
        high = low + 1.0
    width = (high - low) / bins
    counts = [0] * bins
    for value in values:
        counts[min(int((value - low) / width), bins - 1)] += 1
    y_top = nice_max(max(counts))
    parts = _frame(title, x_label, "requests", y_top, low, high, [low + (high - low) * i / 5 for i in range(6)])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bar_w = plot_w / bins
    for i, count in enumerate(counts):
        bar_h = plot_h * count / y_top
        parts.append(f'<rect x="{LEFT + i * bar_w + 1:.1f}" y="{TOP + plot_h - bar_h:.1f}" '
                     f'width="{max(bar_w - 2, 1):.1f}" height="{bar_h:.1f}" fill="{PALETTE[0]}"/>')
    for number, (name, value) in enumerate(marks):
        x = LEFT + plot_w * (value - low) / (high - low)
        color = PALETTE[(number + 1) % len(PALETTE)]
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot_h}" stroke="{color}" '
                     f'stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{WIDTH - RIGHT + 10}" y="{TOP + 14 * number + 8}" fill="{color}">'
                     f'{escape(name)} {_fmt(value)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def bar_chart(bars: Sequence[tuple[str, float]], *, title: str, y_label: str,
              groups: Sequence[str] = ()) -> str:
    """One bar per (label, value), labels under the bars (rotated); `groups`, one per bar, colours
    bars of the same group alike and names the colours in the legend."""
    if not bars:
        return empty_chart(title)
    y_top = nice_max(max(value for _, value in bars))
    parts = _frame(title, "", y_label, y_top, 0.0, 1.0, [])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bar_w = plot_w / len(bars)
    names = list(dict.fromkeys(groups))
    for i, (label, value) in enumerate(bars):
        color = PALETTE[names.index(groups[i]) % len(PALETTE)] if i < len(groups) else PALETTE[0]
        bar_h = plot_h * value / y_top
        x = LEFT + i * bar_w
        parts.append(f'<rect x="{x + 1:.1f}" y="{TOP + plot_h - bar_h:.1f}" width="{max(bar_w - 2, 1):.1f}" '
                     f'height="{bar_h:.1f}" fill="{color}"><title>{escape(label)}: {_fmt(value)}</title></rect>')
        if len(bars) <= 40:
            cx, cy = x + bar_w / 2, TOP + plot_h + 6
            parts.append(f'<text x="{cx:.1f}" y="{cy:.1f}" font-size="8" text-anchor="end" '
                         f'transform="rotate(-45 {cx:.1f} {cy:.1f})">{escape(label[-10:])}</text>')
    for number, name in enumerate(names):
        legend_y = TOP + 14 * number + 8
        parts.append(f'<rect x="{WIDTH - RIGHT + 10}" y="{legend_y - 8}" width="10" height="10" '
                     f'fill="{PALETTE[number % len(PALETTE)]}"/>')
        parts.append(f'<text x="{WIDTH - RIGHT + 24}" y="{legend_y + 1}">{escape(name[:22])}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def empty_chart(title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} 60" width="{WIDTH}" height="60" '
            f'role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="12">'
            f'<title>{escape(title)}</title><text x="10" y="34">{escape(title)}: no data</text></svg>')
