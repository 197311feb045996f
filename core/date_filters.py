"""The date filters of every template (settings: TEMPLATES OPTIONS builtins): ``{{ at|moment }}``,
``{{ at|moment:"seconds" }}``, ``{{ day|day }}``, ``{{ at|clock }}``. The format is core/dates.py's;
None renders empty, so ``|default:"—"`` works."""
from __future__ import annotations

from datetime import date, datetime, time

from django import template

from core.dates import clock_text, day_text, moment_text

register = template.Library()


@register.filter(name="day")
def day_filter(value: date | datetime | None) -> str:
    return "" if value is None or value == "" else day_text(value)


@register.filter(name="moment")
def moment_filter(value: datetime | None, precision: str = "") -> str:
    return "" if value is None or value == "" else moment_text(value, seconds=precision == "seconds")


@register.filter(name="clock")
def clock_filter(value: datetime | time | None, precision: str = "") -> str:
    return "" if value is None or value == "" else clock_text(value, seconds=precision == "seconds")
