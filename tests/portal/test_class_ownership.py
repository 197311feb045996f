"""Classes belong to their teachers (issue 21, item 3): a teacher sees and acts only on their
classes' students; another teacher's class, student or key answers 404; nobody but an admin
changes a teacher's or an admin's account, limits or keys; one notion of "teacher" (an active
staff account) for pages, the /api/, the fleet websocket and the commands."""
from __future__ import annotations

import asyncio
import io
import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.management import call_command
from django.test import Client

from accounts.models import ApiKey, Classroom, User
from accounts.services import key_issue, user_ensure
from portal.consumers import FleetConsumer
from portal.fleet_push import publisher
from tests.portal.conftest import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(django_user_model) -> User:  # noqa: ANN001
    person = user_ensure(username="root", role="teacher", password="pw-root-1")[0]
    User.objects.filter(id=person.id).update(is_superuser=True)
    person.refresh_from_db()
    return person


def test_another_teachers_class_student_and_key_answer_404(taught_class, student, second_teacher) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    other = signed_in(second_teacher)
    assert other.get(f"/teacher/classes/{taught_class.id}/").status_code == 404
    assert other.get(f"/teacher/students/{student.id}/").status_code == 404
    for action, data in ((f"/teacher/students/{student.id}/active/", {"active": "0"}),
                         (f"/teacher/students/{student.id}/link/", {}),
                         (f"/teacher/students/{student.id}/limits/", {"requests_per_minute": "0"}),
                         (f"/teacher/students/{student.id}/budget/grant/", {"period": "week", "tokens": "5"}),
                         (f"/teacher/students/{student.id}/budget/reset/", {"period": "week"}),
                         (f"/teacher/classes/{taught_class.id}/term/", {}),
                         (f"/teacher/classes/{taught_class.id}/limits/", {"tokens_per_day": "1"}),
                         (f"/teacher/classes/{taught_class.id}/pause/", {}),
                         (f"/teacher/keys/{key.id}/revoke/", {})):
        assert other.post(action, data).status_code == 404, action
    student.refresh_from_db()
    taught_class.refresh_from_db()
    assert student.is_active and student.requests_per_minute is None and not taught_class.paused
    assert ApiKey.objects.get(id=key.id).revoked_at is None
    # Nowhere on the page, once the forms' CSRF tokens (random letters and digits) are left out.
    home = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", other.get("/teacher/").content.decode())
    assert "7A" not in home and f"/teacher/classes/{taught_class.id}/" not in home


def test_a_teacher_sees_only_their_students_in_usage_and_the_request_log(taught_class, student, teacher,
                                                                         second_teacher) -> None:  # noqa: ANN001
    from tests.portal.test_pages import log_request

    mine = User.objects.create(username="grace", classroom=Classroom.objects.create(name="8B"))
    mine.classroom.teachers.add(second_teacher)
    log_request(student, model="model-alice")
    log_request(mine, model="model-grace")
    other = signed_in(second_teacher)
    log_page = other.get("/teacher/requests/").content.decode()
    assert "model-grace" in log_page and "model-alice" not in log_page
    csv_text = other.get("/teacher/usage/?format=csv").content.decode()
    assert "grace" in csv_text and "alice" not in csv_text
    class_csv = signed_in(teacher).get(f"/teacher/usage/?format=csv&class={taught_class.id}").content.decode()
    assert "alice" in class_csv and "grace" not in class_csv
    assert other.get(f"/teacher/usage/?format=csv&class={taught_class.id}").status_code == 404


def test_no_teacher_changes_an_admins_or_another_teachers_limits(teacher, second_teacher, admin,
                                                                 taught_class) -> None:  # noqa: ANN001
    # even a teacher put in their own class as if a student
    User.objects.filter(id__in=[admin.id, second_teacher.id]).update(classroom=taught_class)
    client = signed_in(teacher)
    for target in (admin, second_teacher):
        assert client.post(f"/teacher/students/{target.id}/limits/", {"allowed_models": "nothing"}).status_code == 404
        assert client.post(f"/teacher/students/{target.id}/active/", {"active": "0"}).status_code == 404
        target.refresh_from_db()
        assert target.allowed_models == "" and target.is_active
    admin_key, _ = key_issue(user=admin)
    assert client.post(f"/teacher/keys/{admin_key.id}/revoke/").status_code == 404
    assert ApiKey.objects.get(id=admin_key.id).revoked_at is None


def test_an_admin_sees_every_class_and_student(admin, taught_class, student) -> None:  # noqa: ANN001
    client = signed_in(admin)
    assert client.get(f"/teacher/classes/{taught_class.id}/").status_code == 200
    assert client.get(f"/teacher/students/{student.id}/").status_code == 200
    assert client.get("/teacher/classes/none/").status_code == 200


def test_a_teacher_without_the_staff_flag_reads_nobody_elses_keys_through_the_api(teacher, student,
                                                                                  taught_class) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    client = signed_in(teacher)
    assert client.get(f"/api/usage/{student.username}").status_code == 200
    assert client.get(f"/api/me/keys/{key.id}").status_code == 200
    User.objects.filter(id=teacher.id).update(is_staff=False)  # the admin takes access away
    assert client.get(f"/api/usage/{student.username}").status_code == 404
    assert client.get(f"/api/me/keys/{key.id}").status_code == 404
    assert client.post(f"/api/me/keys/{key.id}/revoke").status_code == 404
    assert ApiKey.objects.get(id=key.id).revoked_at is None


def test_a_teacher_cannot_import_into_another_teachers_class_or_take_their_students(
        second_teacher, taught_class, student) -> None:  # noqa: ANN001
    from django.core.files.uploadedfile import SimpleUploadedFile

    client = signed_in(second_teacher)

    def upload(text: str, room: str) -> int:
        return client.post("/teacher/import/", {"file": SimpleUploadedFile("c.csv", text.encode()),
                                                "classroom": room}).status_code

    assert upload("newkid,,\n", "7A") == 400  # taught by someone else
    assert upload("alice,,\n", "9C") == 400  # alice is in another teacher's class
    student.refresh_from_db()
    assert student.classroom_id == taught_class.id
    assert upload("newkid,,\n", "9C") == 200
    assert Classroom.objects.get(name="9C").teachers.filter(id=second_teacher.id).exists()


@pytest.mark.django_db(transaction=True)
def test_the_fleet_socket_closes_when_the_teacher_loses_access(teacher) -> None:  # noqa: ANN001
    from fleet.models import Worker
    from fleet.services import worker_register, worker_set_state

    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy", slots=2)

    async def scenario() -> dict:
        socket = WebsocketCommunicator(FleetConsumer.as_asgi(), "/ws/fleet/")
        socket.scope["user"] = teacher
        connected, _ = await socket.connect()
        assert connected
        await socket.receive_json_from(timeout=10)
        await sync_to_async(User.objects.filter(id=teacher.id).update)(is_staff=False)
        await sync_to_async(worker_set_state)(worker=worker, state=Worker.State.DOWN, reason="killed")
        await publisher.publish_once()
        closed = await socket.receive_output(timeout=10)
        await socket.disconnect()
        return closed

    closed = asyncio.run(scenario())
    assert closed == {"type": "websocket.close", "code": 4403}
    assert publisher.watchers == 0


def test_create_teacher_prints_a_one_time_link_and_assigns_classes() -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_teacher", "Lovelace", "--classes", "7A,7B", "--site", "https://ocs.example", stdout=out,
                 stderr=err)
    teacher = User.objects.get(username="lovelace")
    assert teacher.is_staff and not teacher.is_superuser and not teacher.has_usable_password()
    assert sorted(teacher.taught_classes.values_list("name", flat=True)) == ["7A", "7B"]
    link = out.getvalue().strip()
    assert link.startswith("https://ocs.example/accounts/set-password/")
    page = Client().get(link.removeprefix("https://ocs.example"), follow=True)
    assert "Choose your password" in page.content.decode()
    call_command("create_teacher", "lovelace", "--classes", "8C", stdout=io.StringIO(), stderr=io.StringIO())
    assert teacher.taught_classes.count() == 3
    User.objects.create(username="kid")
    with pytest.raises(Exception, match="not a staff account"):
        call_command("create_teacher", "kid", stdout=io.StringIO(), stderr=io.StringIO())
