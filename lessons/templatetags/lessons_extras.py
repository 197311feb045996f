"""Small template filters for the burndown's history chart."""
from __future__ import annotations

from django import template

from core.numbers import share_text
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


register.filter("share_text", share_text)
