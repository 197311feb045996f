"""Small template filters for the burndown's history chart."""
from __future__ import annotations

from django import template

from lessons.selectors import HistoryDay

register = template.Library()


@register.filter
def percent_of(day: HistoryDay, state: str) -> float:
    return day.percent(state)


@register.filter
def get_count(counts: dict[str, int], state: str) -> int:
    return counts.get(state, 0)


@register.filter
def lookup(mapping: dict[str, str], key: str) -> str:
    return mapping.get(key, "")


@register.filter
def share_text(percent: float | None) -> str:
    """A share in words that never reads as nothing when it is something: 0.47 -> "0.5 %",
    0.02 -> "under 0.1 %", 63.4 -> "63 %"."""
    if percent is None:
        return "—"
    if percent == 0:
        return "0 %"
    if percent < 0.1:
        return "under 0.1 %"
    if percent < 10:
        return f"{percent:.1f} %".replace(".0 %", " %")
    return f"{percent:.0f} %"
