"""When a class is paused (exam mode): pure rules over a one-off pause and a weekly timetable.
No Django: the caller passes "now" in the school's time zone.

- A one-off pause runs from `starts` (None: already) until `until` (None: until resumed).
- A weekly window is a weekday (Monday = 0: weeks start on Monday) and wall-clock start and
  end times in the school's time zone. A window whose end is not after its start ends the
  next day (22:00-01:00 on Friday ends Saturday 01:00). Times are wall-clock: a window keeps
  its hours across a daylight-saving change.
- A teacher's "resume" during a timetable window lifts that window only (`lifted_until` is
  its end); the next window pauses the class again.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from core.dates import moment_or_clock_format

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass(frozen=True)
class Window:
    """One weekly pause: `weekday` 0 (Monday) to 6, from `starts` to `ends` (school time)."""

    weekday: int
    starts: time
    ends: time
    message: str = ""

    def describe(self) -> str:
        return f"{WEEKDAYS[self.weekday]} {self.starts:%H:%M}–{self.ends:%H:%M}"

    def occurrence(self, day: date, zone: tzinfo) -> tuple[datetime, datetime]:
        """This window's start and end if it starts on `day` (whatever weekday `day` is)."""
        start = datetime.combine(day, self.starts, tzinfo=zone)
        end_day = day if self.ends > self.starts else day + timedelta(days=1)
        return start, datetime.combine(end_day, self.ends, tzinfo=zone)


@dataclass(frozen=True)
class PauseRule:
    """Everything that can pause one class, as cached with each of its students' keys."""

    class_name: str
    starts: datetime | None = None  # one-off pause: set with `active`
    until: datetime | None = None
    active: bool = False
    by: str = ""  # who paused it: a teacher's name, or "" from the command line
    message: str = ""
    windows: tuple[Window, ...] = ()
    lifted_until: datetime | None = None


@dataclass(frozen=True)
class ActivePause:
    """A pause holding now (or coming): until when, who set it, what the teacher wrote."""

    class_name: str
    starts: datetime | None
    until: datetime | None
    by: str
    message: str
    scheduled: bool  # from the weekly timetable


def _occurrences(rule: PauseRule, now: datetime) -> list[tuple[datetime, datetime, Window]]:
    """Timetable windows starting from yesterday to a week ahead, in start order."""
    zone = now.tzinfo
    assert zone is not None, "now must be aware (school time)"
    found = []
    for offset in range(-1, 8):
        day = now.date() + timedelta(days=offset)
        for window in rule.windows:
            if window.weekday == day.weekday():
                start, end = window.occurrence(day, zone)
                found.append((start, end, window))
    return sorted(found, key=lambda item: item[0])


def active_pause(rule: PauseRule | None, now: datetime) -> ActivePause | None:
    """The pause holding at `now`, or None. A one-off pause wins over the timetable."""
    if rule is None:
        return None
    if rule.active and (rule.starts is None or rule.starts <= now) and (rule.until is None or now < rule.until):
        return ActivePause(rule.class_name, rule.starts, rule.until, rule.by, rule.message, scheduled=False)
    for start, end, window in _occurrences(rule, now):
        if start <= now < end and not (rule.lifted_until is not None and end <= rule.lifted_until):
            return ActivePause(rule.class_name, start, end, "the class timetable", window.message, scheduled=True)
    return None


def upcoming_pause(rule: PauseRule | None, now: datetime, *, within: timedelta) -> ActivePause | None:
    """The next pause starting after `now` and within `within` (a one-off or a window)."""
    if rule is None:
        return None
    if rule.active and rule.starts is not None and now < rule.starts <= now + within:
        return ActivePause(rule.class_name, rule.starts, rule.until, rule.by, rule.message, scheduled=False)
    for start, end, window in _occurrences(rule, now):
        if now < start <= now + within:
            return ActivePause(rule.class_name, start, end, "the class timetable", window.message, scheduled=True)
    return None


def next_time_of_day(at: time, now: datetime) -> datetime:
    """The next `at` o'clock after `now` (today if still ahead, else tomorrow): `--until HH:MM`."""
    assert now.tzinfo is not None
    candidate = datetime.combine(now.date(), at, tzinfo=now.tzinfo)
    return candidate if candidate > now else datetime.combine(now.date() + timedelta(days=1), at,
                                                              tzinfo=now.tzinfo)


def when(at: datetime, now: datetime) -> str:
    """"14:30" today, "2 Dec 2026 14:30" another day (both in `now`'s zone; core/dates.py)."""
    return moment_or_clock_format(at.astimezone(now.tzinfo), now)


def pause_text(pause: ActivePause, now: datetime) -> str:
    """What a refused student reads: the class, who paused it, until when, the teacher's note."""
    who = pause.by or "your teacher"
    until = f"until {when(pause.until, now)}" if pause.until is not None else "until your teacher resumes it"
    text = f"Your class {pause.class_name} is paused by {who} {until}: the AI does not answer meanwhile."
    if pause.message:
        text += f" Note from your teacher: {pause.message}"
    return text
