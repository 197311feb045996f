"""Pausing a class (exam mode, issue 21 item 1): from the class page and the command line, on
every route, on the very next request, with a message that says who and until when."""
from __future__ import annotations

import io
import json
from datetime import time, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from accounts.key_cache import key_authenticate
from accounts.models import AuditEvent, Classroom, User
from accounts.services import class_pause, class_pause_window_add, class_resume, key_issue
from tests.api_client import ApiClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("request_log_written")]

BODY = json.dumps({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})


@pytest.fixture
def room(student: User, other_student: User) -> Classroom:
    classroom = Classroom.objects.create(name="7B")
    User.objects.filter(id__in=[student.id, other_student.id]).update(classroom=classroom)
    return classroom


def refusals(raw: str) -> dict[str, tuple[int, str]]:
    """Every route's (status, text that carries the code) for this key."""
    client = ApiClient()
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    answers = {
        "chat": client.post("/v1/chat/completions", BODY, content_type="application/json", **bearer),
        "completions": client.post("/v1/completions", json.dumps({"model": "m", "prompt": "x"}),
                                   content_type="application/json", **bearer),
        "responses": client.post("/v1/responses", json.dumps({"model": "m", "input": "x"}),
                                 content_type="application/json", **bearer),
        "anthropic": client.post("/v1/messages", BODY, content_type="application/json", HTTP_X_API_KEY=raw),
        "ollama": client.get(f"/ollama/{raw}/api/tags"),
        "ollama-chat": client.post(f"/ollama/{raw}/v1/chat/completions", BODY, content_type="application/json"),
    }
    out = {}
    for name, response in answers.items():
        body = response.json()
        if "error" not in body:  # served
            text = json.dumps(body)
        elif name == "anthropic":
            text = body["error"]["message"]
        elif name == "ollama":
            text = body["error"]
        else:
            text = f"{body['error']['code']}: {body['error']['message']}"
        out[name] = (response.status_code, text)
    return out


def test_a_paused_class_is_refused_on_every_route_then_served_after_resume(room, student, teacher) -> None:  # noqa: ANN001
    teacher.first_name, teacher.last_name = "Grace", "Hopper"
    teacher.save(update_fields=["first_name", "last_name"])
    _key, raw = key_issue(user=student)
    assert async_to_sync(key_authenticate)(raw) is not None  # cached in this process now
    class_pause(classroom=room, actor=teacher, until=timezone.now() + timedelta(minutes=45), message="Exam")
    for route, (status, text) in refusals(raw).items():
        assert status == 403, (route, text)
        assert text.startswith("class_paused: "), (route, text)
        assert "Grace Hopper" in text and "until " in text and "Exam" in text, (route, text)
    class_resume(classroom=room, actor=teacher)
    for route, (status, text) in refusals(raw).items():
        assert "class_paused" not in text, route  # served again (here: no such model)
    assert list(AuditEvent.objects.filter(subject="class 7B").order_by("id").values_list("action", flat=True)) == [
        "class.paused", "class.resumed"]


def test_teachers_and_other_classes_are_not_paused(room, teacher) -> None:  # noqa: ANN001
    teacher.classroom = room
    teacher.save(update_fields=["classroom"])
    elsewhere = User.objects.create(username="zoe", classroom=Classroom.objects.create(name="8A"))
    class_pause(classroom=room, actor=teacher)
    for person in (teacher, elsewhere):
        _key, raw = key_issue(user=person)
        assert all("class_paused" not in text for _, text in refusals(raw).values())


def test_a_timetable_window_pauses_without_anyone_acting(room, student) -> None:  # noqa: ANN001
    now = timezone.localtime()
    start = (now - timedelta(minutes=5)).time().replace(second=0, microsecond=0)
    end = (now + timedelta(minutes=30)).time().replace(second=0, microsecond=0)
    class_pause_window_add(classroom=room, weekday=(now - timedelta(minutes=5)).weekday(), starts=start, ends=end,
                           message="Weekly test")
    _key, raw = key_issue(user=student)
    status, text = refusals(raw)["chat"]
    assert status == 403 and "the class timetable" in text and "Weekly test" in text
    class_resume(classroom=room)  # lifts this window only
    assert "class_paused" not in refusals(raw)["chat"][1]
    assert Classroom.objects.get(id=room.id).pause_lifted_until is not None


def test_commands_pause_until_the_next_such_time_and_resume(room, student) -> None:  # noqa: ANN001
    out = io.StringIO()
    call_command("pause_class", "7B", "--until", "23:59", "--message", "Quiz", stdout=out)
    room.refresh_from_db()
    assert room.paused and room.pause_until is not None and room.pause_message == "Quiz"
    local_until = timezone.localtime(room.pause_until)
    assert local_until.time() == time(23, 59) and local_until > timezone.now()
    assert "paused: class 7B until" in out.getvalue()
    _key, raw = key_issue(user=student)
    assert refusals(raw)["chat"][0] == 403
    call_command("resume_class", "7B", stdout=io.StringIO())
    assert refusals(raw)["chat"][0] != 403
    assert AuditEvent.objects.filter(action="class.paused", actor__isnull=True).exists()


def test_the_teacher_pauses_from_the_class_page_and_students_see_it_at_home(room, student, teacher) -> None:  # noqa: ANN001
    room.teachers.add(teacher)
    page = Client()
    page.force_login(teacher)
    assert "Pause now" in page.get(f"/teacher/classes/{room.id}/").content.decode()
    response = page.post(f"/teacher/classes/{room.id}/pause/", {"minutes": "30", "message": "Exam until break"})
    assert response.status_code == 302
    room.refresh_from_db()
    assert room.paused and room.paused_by_id == teacher.id
    assert "Resume now" in page.get(f"/teacher/classes/{room.id}/").content.decode()
    home = Client()
    home.force_login(student)
    html = home.get("/").content.decode()
    assert 'id="class-pause"' in html and "Exam until break" in html
    page.post(f"/teacher/classes/{room.id}/resume/")
    assert 'id="class-pause"' not in home.get("/").content.decode()


def test_students_see_a_timetable_pause_coming_within_the_hour(room, student) -> None:  # noqa: ANN001
    soon = timezone.localtime() + timedelta(minutes=20)
    if soon.date() != timezone.localtime().date():
        pytest.skip("too close to midnight for a same-day window")
    class_pause_window_add(classroom=room, weekday=soon.weekday(), starts=soon.time().replace(second=0, microsecond=0),
                           ends=(soon + timedelta(minutes=30)).time().replace(second=0, microsecond=0))
    home = Client()
    home.force_login(student)
    html = home.get("/").content.decode()
    assert "will be paused from" in html


def test_exam_refusals_are_logged_as_the_students_who_tried_and_the_teacher_finds_them(
        room, student, teacher) -> None:  # noqa: ANN001
    from inference.models import RequestLog
    from inference.request_log import request_log

    room.teachers.add(teacher)
    key, raw = key_issue(user=student)
    class_pause(classroom=room, actor=teacher, until=timezone.now() + timedelta(minutes=45), message="Exam")
    assert refusals(raw)["chat"][0] == 403
    request_log().flush()
    paused = RequestLog.objects.filter(error_code="class_paused")
    assert paused.count() >= 1 and {(row.user_id, row.key_id) for row in paused} == {(student.id, key.id)}
    page = Client()
    page.force_login(teacher)
    found = page.get(f"/teacher/requests/?student={student.username}").content.decode()
    assert "class_paused" in found
