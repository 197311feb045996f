"""Classes are made, renamed, archived and filled in the site (issue 52, item 4), and the teacher's
landing page answers "how is my class doing right now?" without a click: each class today against
yesterday, who is near a limit, pauses with Resume and Pause, the workers, recent actions in words."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import AuditEvent, Classroom, User
from accounts.services import class_pause, key_issue, limits_set, user_ensure
from fleet.services import worker_register
from inference.models import RequestLog
from portal.audit_words import Actor, sentence
from portal.services import students_import
from portal.csv_import import parse_students_csv
from tests.portal.conftest import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def their_class(second_teacher: User, django_user_model) -> Classroom:  # noqa: ANN001
    room = Classroom.objects.create(name="9C")
    room.teachers.add(second_teacher)
    user_ensure(username="carol", role="student", password="pw-carol-1")
    User.objects.filter(username="carol").update(classroom=room)
    return room


def test_a_teacher_makes_a_class_they_then_teach(client, teacher) -> None:  # noqa: ANN001
    client.force_login(teacher)
    response = client.post("/teacher/classes/new/", {"name": "  Year 10   Computing "})
    room = Classroom.objects.get(name="Year 10 Computing")
    assert response["Location"] == f"/teacher/classes/{room.id}/"
    assert list(room.teachers.all()) == [teacher]
    assert AuditEvent.objects.filter(action="class.created", actor=teacher).exists()
    again = client.post("/teacher/classes/new/", {"name": "year 10 computing"}, follow=True)
    assert "exists already" in again.content.decode() and Classroom.objects.count() == 1


def test_a_teacher_renames_and_archives_their_class_and_its_history_stays(client, teacher, taught_class,
                                                                           student) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    RequestLog.objects.create(at=timezone.now(), user=student, key=key, model="m", client="openai", path="/v1/x",
                              status=200, prompt_tokens=5, completion_tokens=5)
    client.force_login(teacher)
    client.post(f"/teacher/classes/{taught_class.id}/rename/", {"name": "7A Computing"})
    taught_class.refresh_from_db()
    assert taught_class.name == "7A Computing"
    assert "7A Computing" in client.get("/teacher/").content.decode()
    client.post(f"/teacher/classes/{taught_class.id}/archive/", {"archived": "1"})
    taught_class.refresh_from_db()
    assert taught_class.archived_at is not None
    dashboard = client.get("/teacher/").content.decode()
    assert 'data-class="7A Computing"' not in dashboard and "Archived:" in dashboard
    student.refresh_from_db()
    assert student.classroom_id == taught_class.id and student.is_active  # keeps account and class
    assert client.get(f"/teacher/classes/{taught_class.id}/").status_code == 200  # history reachable
    assert RequestLog.objects.filter(user=student).count() == 1
    # Gone from the pickers: no one is moved into an archived class.
    other = Classroom.objects.create(name="8B")
    other.teachers.add(teacher)
    page = client.get(f"/teacher/students/{student.id}/").content.decode()
    assert f'value="{taught_class.id}"' not in page and f'value="{other.id}"' in page
    client.post(f"/teacher/classes/{taught_class.id}/archive/", {"archived": "0"})
    taught_class.refresh_from_db()
    assert taught_class.archived_at is None
    assert [e.action for e in AuditEvent.objects.order_by("at")][-3:] == ["class.renamed", "class.archived",
                                                                          "class.restored"]


def test_a_teacher_moves_a_student_between_their_classes_and_it_is_audited(client, teacher, taught_class,
                                                                             student) -> None:  # noqa: ANN001
    other = Classroom.objects.create(name="Year 10")
    other.teachers.add(teacher)
    client.force_login(teacher)
    page = client.get(f"/teacher/students/{student.id}/").content.decode()
    assert 'id="move-student"' in page and "No class" not in page  # a teacher keeps students in their classes
    client.post(f"/teacher/students/{student.id}/move/", {"classroom": str(other.id)})
    student.refresh_from_db()
    assert student.classroom_id == other.id
    event = AuditEvent.objects.get(action="student.moved")
    assert (event.actor, event.subject, event.detail) == (teacher, "alice", "from 7A to Year 10")
    assert "You moved alice from 7A to Year 10" in client.get("/teacher/").content.decode()
    # Into no class: an admin's move only.
    assert client.post(f"/teacher/students/{student.id}/move/", {"classroom": "none"}).status_code == 404


def test_a_teacher_of_another_class_gets_404_on_every_new_url(teacher, taught_class, student, second_teacher,
                                                                their_class) -> None:  # noqa: ANN001
    outsider = signed_in(second_teacher)
    carol = User.objects.get(username="carol")
    for path, data in [(f"/teacher/classes/{taught_class.id}/rename/", {"name": "mine now"}),
                       (f"/teacher/classes/{taught_class.id}/archive/", {"archived": "1"}),
                       (f"/teacher/students/{student.id}/move/", {"classroom": str(their_class.id)})]:
        assert outsider.post(path, data).status_code == 404, path
    # Nor may the class's own teacher move their student into the other teacher's class, or take theirs.
    own = signed_in(teacher)
    assert own.post(f"/teacher/students/{student.id}/move/", {"classroom": str(their_class.id)}).status_code == 404
    assert own.post(f"/teacher/students/{carol.id}/move/", {"classroom": str(taught_class.id)}).status_code == 404
    taught_class.refresh_from_db()
    student.refresh_from_db()
    carol.refresh_from_db()
    assert (taught_class.name, taught_class.archived_at) == ("7A", None)
    assert (student.classroom_id, carol.classroom_id) == (taught_class.id, their_class.id)
    assert not AuditEvent.objects.filter(action__in=["class.renamed", "class.archived", "student.moved"]).exists()
    # the class's name as a word: a CSRF token on the page may hold the letters "9C" by chance
    assert not re.search(r"\b9C\b", own.get("/teacher/").content.decode())


def test_a_student_reaches_none_of_the_new_urls(client, student, taught_class) -> None:  # noqa: ANN001
    client.force_login(student)
    for path in ["/teacher/classes/new/", f"/teacher/classes/{taught_class.id}/rename/",
                 f"/teacher/classes/{taught_class.id}/archive/", f"/teacher/students/{student.id}/move/"]:
        response = client.post(path, {"name": "x", "archived": "1", "classroom": str(taught_class.id)})
        assert response.status_code in (302, 403) and "/teacher/" not in response.get("Location", ""), path
    assert Classroom.objects.count() == 1 and not AuditEvent.objects.exists()


def test_the_landing_page_shows_each_class_today_against_yesterday(client, teacher, taught_class, student,
                                                                   other_student) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    now = timezone.now()
    for at, user in [(now, student), (now, student), (now - timedelta(days=1), student),
                     (now - timedelta(days=1), other_student)]:
        RequestLog.objects.create(at=at, user=user, key=key, model="m", client="openai", path="/v1/chat/completions",
                                  status=200, prompt_tokens=100, completion_tokens=50)
    worker_register(name="rig1-a", base_url="http://127.0.0.1:9", model_id="smollm2-135m-instruct",
                    pool_name="production", state="healthy")
    client.force_login(teacher)
    page = client.get("/teacher/").content.decode()
    row = page[page.index('data-class="7A"'):]
    row = row[:row.index("</article>")]
    assert '<dt>Requests</dt><dd>2 <small class="muted">yesterday 2</small>' in row
    assert '<dt>Tokens</dt><dd>300 <small class="muted">yesterday 300</small>' in row
    assert '<dt>Active students</dt><dd>1 of 2 <small class="muted">yesterday 2</small>' in row
    assert "Pause 7A now" in row and "Served" in row
    assert "1 worker: 1 healthy" in page and 'href="/teacher/fleet/"' in page


def test_a_paused_class_shows_resume_on_the_landing_page_and_resume_returns_there(client, teacher,
                                                                                   taught_class) -> None:  # noqa: ANN001
    class_pause(classroom=taught_class, actor=teacher, message="Exam")
    client.force_login(teacher)
    page = client.get("/teacher/").content.decode()
    assert "<strong>Paused</strong> until resumed: Exam" in page and "Resume 7A" in page
    response = client.post(f"/teacher/classes/{taught_class.id}/resume/", {"back": "dashboard"})
    assert response["Location"] == "/teacher/"
    taught_class.refresh_from_db()
    assert not taught_class.paused
    client.post(f"/teacher/classes/{taught_class.id}/pause/", {"back": "dashboard", "message": "Quiet"})
    taught_class.refresh_from_db()
    assert taught_class.paused and taught_class.pause_message == "Quiet"


def test_recent_actions_are_sentences(client, teacher, taught_class, second_teacher) -> None:  # noqa: ANN001
    students_import(rows=parse_students_csv("username,email,name\nfay,,Fay\ngus,,Gus\n"), classroom_name="7A",
                    actor=teacher)
    limits_set(target=taught_class, actor=teacher, requests_per_minute=30)
    client.force_login(teacher)
    page = client.get("/teacher/").content.decode()
    assert "You imported 2 students into 7A" in page
    assert "You set 7A&#x27;s limit to 30 requests a minute" in page
    assert "students.imported" not in page and "requests_per_minute" not in page


def test_sentences_name_the_person_and_say_inherit_in_words() -> None:
    ray = Actor(7, "Ms Ray")
    assert sentence(action="limits.changed", subject="class Year 10", detail="requests_per_minute=30",
                    actor=ray, viewer_id=1) == "Ms Ray set Year 10's limit to 30 requests a minute"
    assert sentence(action="limits.changed", subject="alice", detail="tokens_per_day=20000, concurrency=inherit",
                    actor=ray, viewer_id=7) == ("You set alice's limits to 20,000 tokens a day, requests at once "
                                                "back to the default")
    assert sentence(action="students.imported", subject="class 7A", detail="1 new, 2 updated: a, b, c",
                    actor=None, viewer_id=1) == ("The command line imported 3 students into 7A (1 new, 2 already "
                                                 "had an account)")
    assert sentence(action="budget.granted", subject="alice", detail="5000 extra tokens this day", actor=ray,
                    viewer_id=7) == "You gave alice 5,000 extra tokens this day"
    assert sentence(action="something.new", subject="x", detail="y", actor=ray, viewer_id=1) == \
        "Ms Ray something new x (y)"


@pytest.mark.django_db(transaction=True)
def test_an_extra_allowance_shows_as_extra_not_as_usage_going_down(client, teacher, taught_class,
                                                                    student) -> None:  # noqa: ANN001
    """After 10,530 used of 6,000 a day and 5,000 extra given, the page said "5,530 of 11,000 used"."""
    from asgiref.sync import async_to_sync

    from core.live import live_state
    from core.school_day import today

    limits_set(target=taught_class, actor=teacher, tokens_per_day=6000)
    async_to_sync(live_state().settle)([f"user:{student.id}"], today()[0], 10_530)
    client.force_login(teacher)
    client.post(f"/teacher/students/{student.id}/budget/grant/", {"period": "day", "tokens": "5000"})
    page = client.get(f"/teacher/students/{student.id}/").content.decode()
    assert "Today: 10,530 of 11,000 used (96%), including 5,000 extra you gave" in page
    assert "You set alice&#x27;s" not in page  # (the student page shows no audit)
    own = signed_in(student)
    home = own.get("/").content.decode()
    assert "<strong>470</strong> of 11,000 tokens left today (5,000 extra from your teacher)" in home
    client.post(f"/teacher/students/{student.id}/budget/reset/", {"period": "day"})
    assert "Today: 0 of 6,000 used (0%)" in client.get(f"/teacher/students/{student.id}/").content.decode()


def test_the_class_chart_has_today_a_scale_and_each_days_value(client, teacher, taught_class,
                                                               student) -> None:  # noqa: ANN001
    """The class page said "No usage rolled up yet (today's appears tomorrow)" beside "Tokens today
    8,269", and the charts had no axis and no values."""
    key, _ = key_issue(user=student)
    RequestLog.objects.create(at=timezone.now(), user=student, key=key, model="m", client="openai",
                              path="/v1/chat/completions", status=200, prompt_tokens=8000, completion_tokens=269)
    client.force_login(teacher)
    page = client.get(f"/teacher/classes/{taught_class.id}/").content.decode()
    assert "No usage rolled up" not in page
    chart = page[page.index('<figure class="chart"'):page.index("</figure>")]
    assert "0 to the busiest day (8,269 tokens)" in chart
    assert '<div class="axis" aria-hidden="true"><span>8.3k</span><span>0</span></div>' in chart
    assert "8.3k<span class=\"visually-hidden\"> tokens</span>" in chart


def test_the_home_pages_next_steps_tick_from_the_students_own_records(client, student) -> None:  # noqa: ANN001
    """"Create a key" stayed a to-do with four keys."""
    client.force_login(student)
    page = client.get("/").content.decode()
    assert page.count('data-done="no"') == 4
    key, _ = key_issue(user=student)
    RequestLog.objects.create(at=timezone.now(), user=student, key=key, model="m", client="openai",
                              path="/v1/chat/completions", status=200, user_agent="Mozilla/5.0 (X11) Chrome/131")
    page = client.get("/").content.decode()
    assert page.count('data-done="yes"') == 2 and "You have a key" in page and "Create a key" not in page
    RequestLog.objects.create(at=timezone.now(), user=student, key=key, model="m", client="anthropic",
                              path="/v1/messages", status=200, user_agent="claude-cli/2.0.1", tool="claude-code")
    page = client.get("/").content.decode()
    assert page.count('data-done="yes"') == 3 and "Your editor is connected" in page


def test_date_fields_take_and_show_days_as_the_pages_write_them(client, teacher, taught_class) -> None:  # noqa: ANN001
    """Date pickers showed mm/dd/yyyy (an American browser's order) beside "5 Dec 2026"."""
    client.force_login(teacher)
    client.post(f"/teacher/classes/{taught_class.id}/term/", {"term_starts": "7 Sep 2026", "term_ends": "18 dec 2026"})
    taught_class.refresh_from_db()
    assert (taught_class.term_starts.isoformat(), taught_class.term_ends.isoformat()) == ("2026-09-07", "2026-12-18")
    page = client.get(f"/teacher/classes/{taught_class.id}/").content.decode()
    assert 'value="7 Sep 2026"' in page and 'type="date"' not in page
    assert 'type="time"' not in page  # the pause's "until" and the timetable: 24-hour text, as the pages
    client.post(f"/teacher/classes/{taught_class.id}/timetable/", {"weekday": "0", "starts": "14:30", "ends": "15:15"})
    assert taught_class.pause_windows.get().starts.isoformat() == "14:30:00"
    assert 'type="datetime-local"' not in client.get("/teacher/requests/").content.decode()
    assert client.get("/teacher/requests/?since=5+Dec+2026+14%3A30").status_code == 200
    assert 'type="date"' not in client.get("/ground0/").content.decode()
    client.post("/ground0/sprint/", {"name": "S1", "starts_on": "1 Dec 2026", "ends_on": "2026-12-14"})
    from lessons.models import Sprint

    assert Sprint.objects.get(name="S1").ends_on.isoformat() == "2026-12-14"


def test_connect_warnings_show_model_names_as_code_not_backticks(client, student) -> None:  # noqa: ANN001
    worker_register(name="w-small", base_url="http://127.0.0.1:9", model_id="tiny", pool_name="production",
                    state="healthy", context_length=4096)
    client.force_login(student)
    html = client.get("/connect/").content.decode()
    warning = html[html.index('data-context-warning="codex"'):]
    warning = warning[:warning.index("</p>")]
    assert "<code>tiny</code>" in warning and "`" not in warning


def test_an_import_says_which_students_it_moved_from_another_class(client, teacher, taught_class,
                                                                    student) -> None:  # noqa: ANN001
    """A CSV import into a class silently moved its existing students there."""
    other = Classroom.objects.create(name="Year 10")
    other.teachers.add(teacher)
    client.force_login(teacher)
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("class.csv", b"username,email,name\nalice,,Alice\nnewbie,,New Bie\n")
    page = client.post("/teacher/import/", {"file": upload, "classroom": "Year 10"}).content.decode()
    assert "<strong>moved</strong> from 7A" in page
    event = AuditEvent.objects.get(action="students.imported")
    assert "alice (from 7A)" in event.detail
    assert "You imported 2 students into Year 10 (1 new, 1 already had an account)" in \
        client.get("/teacher/").content.decode()
