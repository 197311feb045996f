"""The team's sprint on the burndown: the teacher sets its dates, the history follows it, and the
page says how much is left against a straight line to zero on the sprint's last day."""
from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.utils import timezone

from accounts.models import AuditEvent
from lessons.sprint import SprintDatesError, check_dates, sprint_view

D = date(2026, 11, 2)  # a Monday


def test_the_straight_line_runs_from_the_first_snapshot_to_zero_on_the_last_day() -> None:
    history = [(D, {"open": 8, "partial": 2}), (D + timedelta(days=4), {"open": 4, "partial": 1, "done": 5})]
    view = sprint_view(name="S1", starts_on=D, ends_on=D + timedelta(days=10), today=D + timedelta(days=5),
                       history=history)
    assert (view.length_days, view.day, view.days_left, view.phase) == (11, 6, 5, "during")
    assert (view.remaining_at_start, view.remaining_now) == (10, 5)
    assert view.ideal_now == 5.0 and view.on_track is True  # 10 × (1 − 5/10)
    behind = sprint_view(name="S1", starts_on=D, ends_on=D + timedelta(days=10), today=D + timedelta(days=8),
                         history=history)
    assert behind.ideal_now == 2.0 and behind.on_track is False


def test_only_snapshots_inside_the_sprint_count_and_rehearsed_rows_are_not_done() -> None:
    history = [(D - timedelta(days=1), {"open": 10}), (D + timedelta(days=1), {"open": 3, "rehearsed": 2, "done": 5}),
               (D + timedelta(days=20), {"done": 10})]
    view = sprint_view(name="S", starts_on=D, ends_on=D + timedelta(days=13), today=D + timedelta(days=30),
                       history=history)
    assert (view.remaining_at_start, view.remaining_now) == (5, 5)  # the day before and the day after are out
    assert (view.phase, view.days_left, view.ideal_now) == ("after", 0, 0.0)
    before = sprint_view(name="S", starts_on=D, ends_on=D + timedelta(days=13), today=D - timedelta(days=3),
                         history=history)
    assert (before.phase, before.day, before.days_left, before.remaining_now, before.on_track) == (
        "before", 0, 14, None, None)


def test_dates_that_make_no_sprint_are_refused() -> None:
    check_dates(D, D)  # a one-day sprint is a sprint
    with pytest.raises(SprintDatesError, match="end on or after"):
        check_dates(D, D - timedelta(days=1))
    with pytest.raises(SprintDatesError, match="at most 120 days"):
        check_dates(D, D + timedelta(days=120))


@pytest.mark.django_db
def test_the_teacher_sets_the_sprint_and_the_history_follows_it(client, teacher, student) -> None:  # noqa: ANN001
    from lessons.models import BurndownSnapshot, Sprint

    today = timezone.localdate()
    start = today - timedelta(days=3)
    for offset, state in ((-10, "open"), (-3, "open"), (-1, "done")):  # a snapshot from before the sprint, two in it
        BurndownSnapshot.objects.create(day=today + timedelta(days=offset), deliverable="baseline", state=state)
    client.force_login(student)
    assert client.post("/ground0/sprint/", {"name": "x", "starts_on": start, "ends_on": today}).status_code == 403
    assert not Sprint.objects.exists()

    client.force_login(teacher)
    refused = client.post("/ground0/sprint/", {"name": "Backwards", "starts_on": today, "ends_on": start}, follow=True)
    assert "must end on or after" in refused.content.decode() and not Sprint.objects.exists()
    garbled = client.post("/ground0/sprint/", {"name": "x", "starts_on": "soon", "ends_on": ""}, follow=True)
    assert "as dates" in garbled.content.decode() and not Sprint.objects.exists()

    client.post("/ground0/sprint/", {"name": "Rig sprint", "starts_on": start.isoformat(),
                                     "ends_on": (today + timedelta(days=3)).isoformat()})
    assert AuditEvent.objects.filter(action="ground0_sprint_set", subject="Rig sprint", actor=teacher).exists()
    client.force_login(student)
    page = client.get("/ground0/").content.decode()
    history = page.split('id="burndown-history"', 1)[1]
    days = {part.split('"', 1)[0] for part in history.split('data-day="')[1:]}
    in_sprint = {(today + timedelta(days=o)).isoformat() for o in (-3, -1, 0)}  # opening the page snapshots today
    assert days == in_sprint, "the history spans the sprint, not the last 30 days"
    summary = history.split('id="sprint-summary"', 1)[1].split("</p>", 1)[0]
    assert "Rig sprint" in summary and "Day 4 of 7, 3 days left" in summary
    assert 'id="sprint-form"' not in page  # students see the sprint, only teachers set it
