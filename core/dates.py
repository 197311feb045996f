"""How people read a day or a moment, on every page (the student portal, the teacher's pages,
research, the lessons) and in the messages those pages and the API show: one format, in the
school's time zone (settings.TIME_ZONE). The only place that spells a date format.

    a day        1 Dec 2026
    a moment     1 Dec 2026 15:18       (1 Dec 2026 15:18:07 where seconds matter: request logs, runs)
    a time       15:18                  (a time of day without a date: timetables, "until 15:18" today)

Day, month name, year, 24-hour clock: no reader mistakes 1/12 for 12/1. Machine-readable copies
(a ``<time datetime>`` or ``data-*`` attribute, CSV, JSON) stay ISO 8601.

Templates use the filters in core/date_filters.py (``day``, ``moment``, ``moment:"seconds"``,
``clock``), built into every template by settings; Django's own DATE_FORMAT and DATETIME_FORMAT
are the same (ocsweb/formats), so a value printed without a filter reads the same.

The ``*_format`` functions are pure (they format the value in its own zone); the ``*_text``
functions first put an aware moment in the school's zone.
"""
from __future__ import annotations

from datetime import date, datetime, time

from django.utils import timezone

# Django's date-format syntax (settings, the admin); the functions below spell the same with strftime.
DAY = "j M Y"
MOMENT = "j M Y H:i"
MOMENT_SECONDS = "j M Y H:i:s"
CLOCK = "H:i"
CLOCK_SECONDS = "H:i:s"
# What a rendered day or moment looks like, as a regular expression (for tests and checks).
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MOMENT_PATTERN = r"\b\d{1,2} (?:" + "|".join(MONTHS) + r") \d{4}(?: \d{2}:\d{2}(?::\d{2})?)?"


def day_format(value: date) -> str:
    """"1 Dec 2026". Month names are English whatever the process's locale."""
    return f"{value.day} {MONTHS[value.month - 1]} {value.year}"


def clock_format(value: datetime | time, *, seconds: bool = False) -> str:
    """"15:18" or "15:18:07", as given (no zone conversion)."""
    return f"{value:%H:%M:%S}" if seconds else f"{value:%H:%M}"


def moment_format(value: datetime, *, seconds: bool = False) -> str:
    """"1 Dec 2026 15:18", as given (no zone conversion)."""
    return f"{day_format(value)} {clock_format(value, seconds=seconds)}"


def moment_or_clock_format(value: datetime, reference: datetime) -> str:
    """"15:18" when `value` falls on `reference`'s day, else "2 Dec 2026 15:18" (both as given)."""
    return clock_format(value) if value.date() == reference.date() else moment_format(value)


def school(at: datetime) -> datetime:
    """An aware moment in the school's zone (a naive one is taken as already there)."""
    return timezone.localtime(at) if timezone.is_aware(at) else at


def day_text(value: date | datetime | None) -> str:
    """A day; a moment's day in the school's zone; None -> "—"."""
    if value is None:
        return "—"
    return day_format(school(value) if isinstance(value, datetime) else value)


def moment_text(at: datetime | None, *, seconds: bool = False) -> str:
    """A moment in the school's zone: "1 Dec 2026 15:18" (or "…15:18:07"); None -> "—"."""
    return "—" if at is None else moment_format(school(at), seconds=seconds)


def clock_text(at: datetime | time | None, *, seconds: bool = False) -> str:
    """A time of day, "15:18" (a moment first put in the school's zone); None -> "—"."""
    if at is None:
        return "—"
    return clock_format(school(at) if isinstance(at, datetime) else at, seconds=seconds)
