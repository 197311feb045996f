"""The school's day, week and term (settings.TIME_ZONE): token budgets, roll-ups and "today"
all use them. Weeks start on Monday."""
from __future__ import annotations

from datetime import date, datetime, time, timedelta

from django.utils import timezone

from core.dates import moment_or_clock_format


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """Start (midnight, school time) of `day` and of the day after."""
    start = datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())
    return start, start + timedelta(days=1)


def today(now: datetime | None = None) -> tuple[str, float]:
    """The school's day as "YYYY-MM-DD", and seconds until it ends."""
    local = timezone.localtime(now)
    _start, end = day_bounds(local.date())
    return local.date().isoformat(), (end - local).total_seconds()


def school_time(at: datetime, now: datetime | None = None) -> str:
    """`at` as the school reads it: "14:30 CET" today, "2 Dec 2026 14:30 CET" another day (core/dates.py)."""
    local, reference = timezone.localtime(at), timezone.localtime(now)
    return f"{moment_or_clock_format(local, reference)} {local:%Z}".strip()


def this_week(now: datetime | None = None) -> tuple[str, float]:
    """The school's week (Monday to Sunday) as "W" + its Monday's date, and seconds until it ends."""
    local = timezone.localtime(now)
    monday = local.date() - timedelta(days=local.weekday())
    _start, end = day_bounds(monday + timedelta(days=6))
    return f"W{monday.isoformat()}", (end - local).total_seconds()


def this_term(term: tuple[date, date] | None, now: datetime | None = None) -> tuple[str, float] | None:
    """The term holding today as "T" + its first day, and seconds until it ends; None outside it."""
    if term is None:
        return None
    local = timezone.localtime(now)
    first, last = term
    if not first <= local.date() <= last:
        return None
    _start, end = day_bounds(last)
    return f"T{first.isoformat()}", (end - local).total_seconds()
