"""The pause rules (accounts/pause.py), pure: one-off pauses, weekly windows in the school's
time zone, windows past midnight, a resume lifting one window."""
from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from accounts.pause import PauseRule, Window, active_pause, next_time_of_day, pause_text, upcoming_pause

BERLIN = ZoneInfo("Europe/Berlin")


def at(day: int, hour: int, minute: int = 0) -> datetime:
    """December 2026: the 7th is a Monday."""
    return datetime(2026, 12, day, hour, minute, tzinfo=BERLIN)


def test_a_one_off_pause_holds_from_its_start_until_its_end() -> None:
    rule = PauseRule("7B", starts=at(7, 9), until=at(7, 10, 30), active=True, by="Ms. T", message="exam")
    assert active_pause(rule, at(7, 8, 59)) is None
    holding = active_pause(rule, at(7, 9, 0))
    assert holding is not None and holding.until == at(7, 10, 30) and not holding.scheduled
    assert active_pause(rule, at(7, 10, 30)) is None
    assert active_pause(PauseRule("7B", active=True), at(31, 23)) is not None  # no end: until resumed


def test_a_weekly_window_holds_on_its_weekday_only_with_weeks_starting_monday() -> None:
    rule = PauseRule("7B", windows=(Window(0, time(10), time(11, 30)),))
    assert active_pause(rule, at(7, 10, 15)) is not None  # Monday
    assert active_pause(rule, at(8, 10, 15)) is None  # Tuesday
    assert active_pause(rule, at(14, 11, 29)) is not None  # the next Monday
    holding = active_pause(rule, at(14, 11, 29))
    assert holding is not None and holding.until == at(14, 11, 30) and holding.scheduled


def test_a_window_ending_past_midnight_ends_the_next_day() -> None:
    rule = PauseRule("7B", windows=(Window(4, time(22), time(1)),))  # Friday 22:00 to Saturday 01:00
    assert active_pause(rule, at(11, 23)) is not None
    holding = active_pause(rule, at(12, 0, 30))  # Saturday, half past midnight: still Friday's window
    assert holding is not None and holding.until == at(12, 1)
    assert active_pause(rule, at(12, 1, 0)) is None
    assert active_pause(rule, at(12, 23)) is None  # Saturday evening: no window


def test_resume_during_a_window_lifts_that_window_only() -> None:
    window = Window(0, time(10), time(11))
    rule = PauseRule("7B", windows=(window,), lifted_until=at(7, 11))
    assert active_pause(rule, at(7, 10, 30)) is None
    assert active_pause(rule, at(14, 10, 30)) is not None


def test_a_window_keeps_its_wall_clock_hours_across_a_daylight_saving_change() -> None:
    rule = PauseRule("7B", windows=(Window(0, time(9), time(10)),))
    utc = ZoneInfo("UTC")
    # 08:30 UTC is 09:30 in Berlin in winter, 10:30 after the clocks went forward
    assert active_pause(rule, datetime(2027, 3, 22, 8, 30, tzinfo=utc).astimezone(BERLIN)) is not None
    assert active_pause(rule, datetime(2027, 3, 29, 8, 30, tzinfo=utc).astimezone(BERLIN)) is None
    assert active_pause(rule, datetime(2027, 3, 29, 7, 30, tzinfo=utc).astimezone(BERLIN)) is not None


def test_a_pause_coming_within_the_hour_is_announced() -> None:
    rule = PauseRule("7B", windows=(Window(0, time(10), time(11)),))
    coming = upcoming_pause(rule, at(7, 9, 15), within=timedelta(hours=1))
    assert coming is not None and coming.starts == at(7, 10)
    assert upcoming_pause(rule, at(7, 8, 30), within=timedelta(hours=1)) is None


def test_until_is_the_next_such_time_of_day() -> None:
    assert next_time_of_day(time(14, 30), at(7, 9)) == at(7, 14, 30)
    assert next_time_of_day(time(8, 0), at(7, 9)) == at(8, 8, 0)  # already past today: tomorrow


def test_the_students_message_says_who_paused_it_and_until_when() -> None:
    rule = PauseRule("7B", until=at(7, 10, 30), active=True, by="Ms. Turing", message="Exam: no AI")
    holding = active_pause(rule, at(7, 9))
    assert holding is not None
    text = pause_text(holding, at(7, 9))
    assert "7B" in text and "Ms. Turing" in text and "until 10:30" in text and "Exam: no AI" in text
    open_ended = active_pause(PauseRule("7B", active=True), at(7, 9))
    assert open_ended is not None and "until your teacher resumes it" in pause_text(open_ended, at(7, 9))
