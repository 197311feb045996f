"""The team's sprint on the burndown: where today stands between the sprint's dates, and how
much is left against a straight line from the sprint's first day to zero on its last. Pure: the
days and counts come in, nothing is read here."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date

MAX_SPRINT_DAYS = 120
# Rows that still need work: everything not done (a rehearsed rig row still needs the rig).
REMAINING_STATES = ("rehearsed", "partial", "open")


class SprintDatesError(ValueError):
    """Sprint dates a teacher cannot set; the message is for the teacher."""


def check_dates(starts_on: date, ends_on: date) -> None:
    if ends_on < starts_on:
        raise SprintDatesError("The sprint must end on or after the day it starts.")
    if (ends_on - starts_on).days + 1 > MAX_SPRINT_DAYS:
        raise SprintDatesError(f"A sprint is at most {MAX_SPRINT_DAYS} days; split a longer plan into sprints.")


def remaining(counts: dict[str, int]) -> int:
    return sum(counts.get(state, 0) for state in REMAINING_STATES)


@dataclass(frozen=True)
class SprintView:
    name: str
    starts_on: date
    ends_on: date
    length_days: int
    day: int  # today's day of the sprint, 1-based; 0 before it starts, length + 1 after it ends
    days_left: int  # days after today until the end, today excluded (0 on the last day and after)
    remaining_at_start: int | None  # rows not done on the sprint's first snapshot
    remaining_now: int | None  # rows not done on the latest snapshot in the sprint
    ideal_now: float | None  # the straight line from remaining_at_start to 0, at today

    @property
    def phase(self) -> str:
        return "before" if self.day == 0 else ("after" if self.day > self.length_days else "during")

    @property
    def on_track(self) -> bool | None:
        if self.remaining_now is None or self.ideal_now is None:
            return None
        return self.remaining_now <= self.ideal_now + 1e-9


def sprint_view(*, name: str, starts_on: date, ends_on: date, today: date,
                history: list[tuple[date, dict[str, int]]]) -> SprintView:
    """`history`: (day, state -> rows) snapshots, any order; only those inside the sprint count."""
    length = (ends_on - starts_on).days + 1
    day = 0 if today < starts_on else min((today - starts_on).days + 1, length + 1)
    inside = sorted((d, counts) for d, counts in history if starts_on <= d <= min(ends_on, today))
    at_start = remaining(inside[0][1]) if inside else None
    now = remaining(inside[-1][1]) if inside else None
    ideal = None
    if at_start is not None:
        elapsed = min(max((today - starts_on).days, 0), length - 1)
        ideal = round(at_start * (1 - elapsed / (length - 1)), 1) if length > 1 else 0.0
    days_left = max(0, (ends_on - today).days) if today >= starts_on else length
    return SprintView(name=name, starts_on=starts_on, ends_on=ends_on, length_days=length, day=day,
                      days_left=days_left, remaining_at_start=at_start, remaining_now=now, ideal_now=ideal)
