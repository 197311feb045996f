"""One date format on every page (issue 21: "five date formats"): the student portal, the teacher's
pages, research and the lessons render their days and moments as core/dates.py says ("5 Mar 2026",
"5 Mar 2026 01:05", "…01:05:07"), in the school's time zone.

The pages are rendered with known timestamps in a school zone 14 hours ahead of UTC, so a page
that shows UTC, or any other format (ISO, "Mar 5", "5/3", "Thu 5 Mar", "1:05 a.m."), fails."""
from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from core.dates import MOMENT_PATTERN, clock_format, day_format, moment_format

pytestmark = [pytest.mark.django_db, pytest.mark.backend_neutral]  # formatting: once, in the embedded pass

SCHOOL_ZONE = "Pacific/Kiritimati"  # UTC+14: a moment's day there is often not its UTC day
FIXED = datetime(2026, 3, 4, 11, 5, 7, tzinfo=UTC)  # 5 Mar 2026 01:05:07 at school
FIXED_AT_SCHOOL = "5 Mar 2026 01:05"
MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
# What another date format leaves behind once every date in the one format is taken out.
OTHER_FORMATS = {
    "ISO date": r"\b\d{4}-\d{2}-\d{2}",
    "month-day": r"\b\d{2}-\d{2}\b",
    "numeric date": r"(?<![\d.])\d{1,2}[/.]\d{1,2}[/.]\d{2,4}(?![\d.])",
    "month before the day": MONTH + r"[a-z]*\.? \d{1,2}\b",
    "day and month without the year": r"\b\d{1,2} " + MONTH + r"[a-z]*\b",
    "weekday before a date": r"\b" + WEEKDAY + r"[a-z]*\.?,? (?:<when>|\d{1,2} " + MONTH + "|" + MONTH + ")",
    "12-hour clock": r"\d(?::\d{2})? ?(?:a\.m\.|p\.m\.|AM|PM)\b",
    "time zone after a time": r"(?:<when>|\d{2}:\d{2}) ?(?:UTC|GMT|[+-]\d{2}:?\d{2})\b",
}


def chart_ticks(html: str) -> list[str]:
    """The labels under a bar chart's bars: the day of the month only (the bar's title has the date)."""
    return re.findall(r'<div class="bar"[^>]*>.*?<small>([^<]*)</small>', html)


def visible_text(html: str) -> str:
    """What a reader reads as text: no scripts, styles or attributes (where ISO copies may stay),
    no code (commands and headers to copy, such as anthropic-version: 2023-06-01)."""
    html = re.sub(r"(?is)<(script|style|pre|code)\b.*?</\1>", " ", html)
    return re.sub(r"\s+", " ", re.sub(r"(?s)<[^>]+>", " ", html))


def other_formats(text: str) -> list[str]:
    rest = re.sub(MOMENT_PATTERN, "<when>", text)
    found = []
    for name, pattern in OTHER_FORMATS.items():
        for match in re.finditer(pattern, rest):
            found.append(f"{name}: …{rest[max(0, match.start() - 40):match.end() + 40]}…")
    return found


def test_the_format_is_day_month_name_year_and_a_24_hour_clock() -> None:
    moment = datetime(2026, 12, 1, 15, 8, 7)
    assert day_format(date(2026, 12, 1)) == "1 Dec 2026"
    assert moment_format(moment) == "1 Dec 2026 15:08"
    assert moment_format(moment, seconds=True) == "1 Dec 2026 15:08:07"
    assert clock_format(time(9, 5)) == "09:05"
    assert re.fullmatch(MOMENT_PATTERN, moment_format(moment, seconds=True))
    assert other_formats("on Dec 1, 2026 at 3:08 p.m.") and other_formats("2026-12-01 15:08")
    assert other_formats("Tue 1 Dec 2026 15:08") and other_formats("1 Dec 15:08") and other_formats("1/12/2026")
    assert not other_formats("1 Dec 2026 15:08 · Monday 09:00–10:00 · 12 tokens · 3/4 busy slots")


def _world(teacher, student, other_student, taught_class):  # noqa: ANN001, ANN202
    """Something dated on every page: keys, requests, roll-ups, a pause and a timetable, audit
    events, a benchmark run, lesson progress, Ground 0 ticks, fleet events."""
    from accounts.services import class_pause, class_pause_window_add, key_issue, key_revoke, limits_set
    from fleet.models import WorkerEvent
    from fleet.services import worker_register
    from inference.models import DailyUsage, RequestLog
    from lessons.models import DeliverableAchieved, ManualCheck, PathVerification, StepDone
    from research.models import BenchmarkRun

    now = timezone.now()
    key, _raw = key_issue(user=student, name="laptop")
    type(key).objects.filter(id=key.id).update(created_at=FIXED, expires_at=FIXED + timedelta(days=400),
                                               last_used_at=now - timedelta(minutes=5))
    old, _raw = key_issue(user=student, name="old")
    key_revoke(key=old, actor=teacher)
    type(old).objects.filter(id=old.id).update(created_at=FIXED, revoked_at=FIXED)
    limits_set(target=taught_class, actor=teacher, tokens_per_week=50_000)
    for minutes in (5, 70):
        RequestLog.objects.create(at=now - timedelta(minutes=minutes), user=student, key=key, model="m",
                                  client="openai", path="/v1/chat/completions", status=200, prompt_tokens=12,
                                  completion_tokens=30, ttft_ms=120, total_ms=900, tokens_per_s=80.0,
                                  request_id=f"r{minutes}", stream=True)
    today = timezone.localdate()
    for back in (1, 3):
        DailyUsage.objects.create(day=today - timedelta(days=back), user=student, classroom=taught_class, model="m",
                                  requests=4, prompt_tokens=100, completion_tokens=50)
    class_pause_window_add(classroom=taught_class, weekday=0, starts=time(9), ends=time(10), actor=teacher)
    class_pause(classroom=taught_class, actor=teacher, until=now + timedelta(days=3), message="Exam")
    worker = worker_register(name="w-1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy")
    WorkerEvent.objects.create(worker=worker, at=FIXED, from_state="healthy", to_state="draining", reason="teacher")
    BenchmarkRun.objects.create(group="g", target="worker", base_url="http://127.0.0.1:9", model="m", prompt_tokens=8,
                                output_tokens=8, concurrency=1, requests=1, status="done", started_at=FIXED,
                                ended_at=FIXED + timedelta(seconds=90), summary={"duration_s": 1.5})
    StepDone.objects.create(user=student, step="trace-my-request", done_at=FIXED, evidence="seen")
    ManualCheck.objects.create(deliverable="contracts", ticked_by=teacher, ticked_at=FIXED, note="ok")
    PathVerification.objects.create(base_url="https://ai.example.org", passed=False, tls_ok=True, checked_at=FIXED)
    DeliverableAchieved.objects.create(deliverable="contracts", achieved_at=FIXED, evidence="ticked")
    return worker


@override_settings(TIME_ZONE=SCHOOL_ZONE)
def test_every_main_page_shows_dates_in_the_one_format_in_school_time(teacher, student, other_student,
                                                                      taught_class) -> None:  # noqa: ANN001
    from lessons.syllabus import load_catalogue
    from research.models import BenchmarkRun

    _world(teacher, student, other_student, taught_class)
    run = BenchmarkRun.objects.get()
    as_student, as_teacher = Client(), Client()
    as_student.force_login(student)
    as_teacher.force_login(teacher)
    lessons = [f"/lessons/{lesson.slug}/" for lesson in load_catalogue().lessons]
    pages = [(as_student, path) for path in ("/", "/keys/", "/usage/", "/lessons/progress/", *lessons)]
    pages += [(as_teacher, path) for path in (
        "/teacher/", f"/teacher/classes/{taught_class.id}/", f"/teacher/students/{student.id}/", "/teacher/requests/",
        "/teacher/usage/", "/teacher/fleet/", "/research/", f"/research/runs/{run.id}/", "/ground0/",
        "/lessons/teacher/")]
    problems: dict[str, list[str]] = {}
    shown: dict[str, list[str]] = {}
    for client, path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        text = visible_text(html)
        found = other_formats(text) + [f"chart tick {tick!r}" for tick in chart_ticks(html) if not tick.isdigit()]
        if found:
            problems[path] = found
        shown[path] = re.findall(MOMENT_PATTERN, text)
    assert not problems, problems
    # The known moment, in school time (UTC would say 4 Mar), where each page shows it.
    for path in ("/keys/", f"/teacher/students/{student.id}/", f"/research/runs/{run.id}/", "/lessons/progress/",
                 "/research/", "/ground0/"):
        assert any(when.startswith(FIXED_AT_SCHOOL) or when == "5 Mar 2026" for when in shown[path]), (path, shown[path])
    assert chart_ticks(as_student.get("/usage/").content.decode())
    for path in ("/", "/usage/", "/teacher/", f"/teacher/classes/{taught_class.id}/", "/teacher/requests/"):
        assert shown[path], f"{path} shows no date at all: the test would prove nothing there"


@pytest.mark.django_db(transaction=True)  # the fleet view reads on a connection of its own
@override_settings(TIME_ZONE=SCHOOL_ZONE)
def test_the_live_fleet_views_events_carry_their_time_in_the_one_format(teacher, student, other_student,
                                                                        taught_class) -> None:  # noqa: ANN001
    from asgiref.sync import async_to_sync

    from lessons.panels import fleet
    from portal.fleet_status import fleet_status

    _world(teacher, student, other_student, taught_class)
    events = async_to_sync(fleet_status)()["events"]
    for shown in (events, fleet(student).events):
        assert "5 Mar 2026 01:05:07" in [event["at_text"] for event in shown]
        assert all(re.fullmatch(MOMENT_PATTERN, event["at_text"]) for event in shown), shown
