"""Dates typed by a person, in the site's one format ("5 Dec 2026", "5 Dec 2026 14:30") or as ISO
(2026-12-05): a browser's date picker shows its own locale's order (mm/dd/yyyy in an American
browser) beside the pages' "5 Dec 2026", so the forms take text in the pages' format instead.
Pure: no Django."""
from __future__ import annotations

from datetime import date, datetime

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
DAY_FORMATS = ("%d %b %Y", "%d %B %Y", "%Y-%m-%d")
MOMENT_FORMATS = tuple(f"{day} {clock}" for day in DAY_FORMATS for clock in ("%H:%M", "%H:%M:%S")) + (
    "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")
DAY_EXAMPLE = "e.g. 5 Dec 2026"
MOMENT_EXAMPLE = "e.g. 5 Dec 2026 14:30"


def _english(text: str) -> str:
    """Month names parsed as English whatever the process's locale ("dec" -> "Dec")."""
    return " ".join(word.capitalize() if word[:3].capitalize() in MONTHS else word for word in text.split())


def parse_day(text: str) -> date:
    """"5 Dec 2026", "5 December 2026" or "2026-12-05" -> a date; ValueError otherwise."""
    cleaned = _english(text.strip())
    for pattern in DAY_FORMATS:
        try:
            return datetime.strptime(cleaned, pattern).date()
        except ValueError:
            continue
    raise ValueError(f"not a day: {text!r} (write it as 5 Dec 2026)")


def day_text(value: date | None) -> str:
    return "" if value is None else f"{value.day} {MONTHS[value.month - 1]} {value.year}"
