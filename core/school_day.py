"""The school's day (settings.TIME_ZONE): token budgets, roll-ups and "today" all use it."""
from __future__ import annotations

from datetime import date, datetime, time, timedelta

from django.utils import timezone


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
    """`at` as the school reads it: "14:30 CET" today, "Wed 2026-12-02 14:30 CET" another day."""
    local, reference = timezone.localtime(at), timezone.localtime(now)
    if local.date() == reference.date():
        return local.strftime("%H:%M %Z").strip()
    return local.strftime("%a %Y-%m-%d %H:%M %Z").strip()
