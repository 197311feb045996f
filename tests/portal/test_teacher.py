"""The teacher's actions: import, links, limits, disable, revoke, worker actions; all audited."""
from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.models import ApiKey, AuditEvent, Classroom, User
from accounts.services import key_issue
from fleet.models import Pool, Worker
from fleet.services import worker_register

pytestmark = pytest.mark.django_db

CSV = "username,email,name\nCarol,carol@school.example,Carol Jones\ndave,,Dave\nerin,erin@school.example,\n"


@pytest.fixture
def teacher_client(teacher: User) -> Client:
    client = Client()
    client.force_login(teacher)
    return client


def upload(text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile("class.csv", text.encode(), content_type="text/csv")


def test_import_page_creates_students_with_one_time_links(teacher_client: Client, teacher: User) -> None:
    response = teacher_client.post("/teacher/import/", {"file": upload(CSV), "classroom": "7B"})
    assert response.status_code == 200
    html = response.content.decode()
    links = re.findall(r'data-username="(\w+)">(http://testserver/accounts/set-password/[^<]+)<', html)
    assert [u for u, _ in links] == ["carol", "dave", "erin"]
    room = Classroom.objects.get(name="7B")
    carol = User.objects.get(username="carol")
    assert carol.classroom_id == room.id and carol.email == "carol@school.example" and carol.last_name == "Jones"
    assert not carol.has_usable_password() and not carol.is_staff
    assert AuditEvent.objects.filter(action="students.imported", actor=teacher, subject="class 7B").exists()

    # The link lets carol choose a password and signs her in; it works once.
    link = dict(links)["carol"].removeprefix("http://testserver")
    student = Client()
    form_page = student.get(link, follow=True)
    assert "Choose your password" in form_page.content.decode()
    set_url = form_page.redirect_chain[-1][0]
    done = student.post(set_url, {"new_password1": "a-long-pass-phrase-42", "new_password2": "a-long-pass-phrase-42"})
    assert done.status_code == 302 and done["Location"] == "/"
    assert student.get("/").status_code == 200
    assert "no longer works" in Client().get(link, follow=True).content.decode()
    assert Client().login(username="carol", password="a-long-pass-phrase-42")


def test_import_with_a_bad_line_imports_nothing(teacher_client: Client) -> None:
    response = teacher_client.post("/teacher/import/", {"file": upload("ok1,,\nnot valid!,x,\n")})
    assert response.status_code == 400
    assert "line 2" in response.content.decode()
    assert not User.objects.filter(username="ok1").exists()


def test_import_refuses_to_touch_staff(teacher_client: Client, teacher: User) -> None:
    response = teacher_client.post("/teacher/import/", {"file": upload("teacher,x@y.z,Evil\n")})
    assert response.status_code == 400
    teacher.refresh_from_db()
    assert teacher.is_staff and teacher.email != "x@y.z"


def test_an_email_another_account_holds_is_refused_and_nothing_is_imported(
        teacher_client: Client, teacher: User, taught_class: Classroom, student: User, other_student: User) -> None:
    User.objects.filter(id=other_student.id).update(email="Bob@School.example")
    User.objects.filter(id=teacher.id).update(email="head@school.example")
    for taken in ("bob@school.example", "HEAD@school.example"):  # a classmate's, the teacher's own
        response = teacher_client.post("/teacher/import/", {
            "file": upload(f"newkid,,New Kid\nalice,{taken},Alice\n"), "classroom": "7A"})
        assert response.status_code == 400
        html = response.content.decode()
        assert "line 2" in html and "belongs to another account" in html
        assert "bob" not in html.replace(taken, "")  # the holder is not named to a teacher
    student.refresh_from_db()
    assert student.email == "" and not User.objects.filter(username="newkid").exists()
    # Twice in one file is refused too; an account keeps its own address on a re-import.
    twice = teacher_client.post("/teacher/import/", {
        "file": upload("newkid,same@school.example,\nalice,Same@school.example,\n"), "classroom": "7A"})
    assert twice.status_code == 400 and "also on line 1" in twice.content.decode()
    User.objects.filter(id=student.id).update(email="alice@school.example")
    again = teacher_client.post("/teacher/import/", {"file": upload("alice,ALICE@school.example,Alice\n"),
                                                     "classroom": "7A"})
    assert again.status_code == 200


def test_the_admin_refuses_an_email_another_account_holds(admin_client: Client, student: User,
                                                          other_student: User) -> None:
    User.objects.filter(id=other_student.id).update(email="bob@school.example")
    form = admin_client.get(f"/admin/accounts/user/{student.id}/change/").context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None and name != "password"}
    data.update({"email": "BOB@school.example", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00",
                 "user_permissions": [], "groups": []})
    response = admin_client.post(f"/admin/accounts/user/{student.id}/change/", data)
    assert response.status_code == 200 and "belongs to bob" in response.content.decode()
    student.refresh_from_db()
    assert student.email == ""


def test_import_refuses_non_utf8(teacher_client: Client) -> None:
    bad = SimpleUploadedFile("c.csv", "zoë,,\n".encode("latin-1"))
    response = teacher_client.post("/teacher/import/", {"file": bad})
    assert response.status_code == 400 and "UTF-8" in response.content.decode()


def test_students_cannot_import(student: User) -> None:
    client = Client()
    client.force_login(student)
    assert client.post("/teacher/import/", {"file": upload(CSV)}).status_code == 403
    assert not User.objects.filter(username="carol").exists()


def test_import_students_command(tmp_path, teacher: User) -> None:  # noqa: ANN001
    path = tmp_path / "class.csv"
    path.write_text(CSV)
    out, err = io.StringIO(), io.StringIO()
    call_command("import_students", str(path), "--class", "8A", stdout=out, stderr=err)
    lines = out.getvalue().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["carol", "dave", "erin"]
    assert all("\tnew\thttp://127.0.0.1:8000/accounts/set-password/" in line for line in lines)
    assert "3 new, 0 updated, class 8A" in err.getvalue()
    assert User.objects.filter(classroom__name="8A").count() == 3
    # Again: updated, not duplicated.
    call_command("import_students", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    assert User.objects.filter(username__in=["carol", "dave", "erin"]).count() == 3


def test_import_students_command_passwords(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "class.csv"
    path.write_text("zed,,Zed\n")
    out = io.StringIO()
    call_command("import_students", str(path), "--passwords", stdout=out, stderr=io.StringIO())
    password = out.getvalue().split("password ")[1].strip()
    assert Client().login(username="zed", password=password)


def test_import_students_command_errors_are_clear(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_students", str(tmp_path / "missing.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c,d\n")
    with pytest.raises(CommandError, match="line 1: expected 3 columns"):
        call_command("import_students", str(bad))


def test_teacher_disables_and_enables_a_student(teacher_client: Client, student: User, teacher: User,
                                                taught_class: Classroom) -> None:
    assert teacher_client.post(f"/teacher/students/{student.id}/active/", {"active": "0"}).status_code == 302
    student.refresh_from_db()
    assert not student.is_active
    assert AuditEvent.objects.filter(action="student.disabled", subject="alice", actor=teacher).exists()
    teacher_client.post(f"/teacher/students/{student.id}/active/", {"active": "1"})
    student.refresh_from_db()
    assert student.is_active


def test_teacher_revokes_a_students_key(teacher_client: Client, student: User, taught_class: Classroom) -> None:
    key, raw = key_issue(user=student, name="laptop")
    page = teacher_client.get(f"/teacher/students/{student.id}/").content.decode()
    assert key.display in page and raw not in page
    teacher_client.post(f"/teacher/keys/{key.id}/revoke/")
    assert ApiKey.objects.get(id=key.id).revoked_at is not None


def test_teacher_sets_student_and_class_limits(teacher_client: Client, student: User, teacher: User,
                                              taught_class: Classroom) -> None:
    room = Classroom.objects.create(name="7B")
    room.teachers.add(teacher)
    teacher_client.post(f"/teacher/students/{student.id}/limits/", {"requests_per_minute": "5", "tokens_per_day": ""})
    student.refresh_from_db()
    assert student.requests_per_minute == 5 and student.tokens_per_day is None
    teacher_client.post(f"/teacher/classes/{room.id}/limits/", {"tokens_per_day": "100000"})
    room.refresh_from_db()
    assert room.tokens_per_day == 100000
    assert AuditEvent.objects.filter(action="limits.changed", subject="class 7B").exists()
    for bad in ("-1", "99999999999999", "many"):
        response = teacher_client.post(f"/teacher/students/{student.id}/limits/", {"requests_per_minute": bad},
                                       follow=True)
        assert response.status_code == 200 and "Limits not saved" in response.content.decode()
    student.refresh_from_db()
    assert student.requests_per_minute == 5


def test_teacher_sets_a_class_share_weight_and_a_student_cannot(teacher_client: Client, student: User,
                                                                 taught_class: Classroom) -> None:
    room = taught_class
    assert "Share weight" in teacher_client.get(f"/teacher/classes/{room.id}/").content.decode()
    teacher_client.post(f"/teacher/classes/{room.id}/weight/", {"fair_weight": "2"})
    room.refresh_from_db()
    assert room.fair_weight == 2.0
    assert AuditEvent.objects.filter(action="limits.changed", subject="class 7A", detail="fair_weight=2.0").exists()
    response = teacher_client.post(f"/teacher/classes/{room.id}/weight/", {"fair_weight": "50"}, follow=True)
    assert "Share weight not saved" in response.content.decode()
    client = Client()
    client.force_login(student)
    assert client.post(f"/teacher/classes/{room.id}/weight/", {"fair_weight": "10"}).status_code == 403
    room.refresh_from_db()
    assert room.fair_weight == 2.0


def test_teacher_hands_out_a_new_set_password_link(teacher_client: Client, student: User,
                                                   taught_class: Classroom) -> None:
    response = teacher_client.post(f"/teacher/students/{student.id}/link/", follow=True)
    html = response.content.decode()
    assert 'data-testid="set-password-link">http://testserver/accounts/set-password/' in html
    # Shown once.
    assert "set-password-link" not in teacher_client.get(f"/teacher/students/{student.id}/").content.decode()
    assert AuditEvent.objects.filter(action="student.password_link", subject="alice").exists()


def test_teacher_actions_need_post_and_staff(student: User, other_student: User) -> None:
    client = Client()
    client.force_login(other_student)
    assert client.post(f"/teacher/students/{student.id}/active/", {"active": "0"}).status_code == 403
    student.refresh_from_db()
    assert student.is_active


def test_unknown_student_or_class_is_404(teacher_client: Client) -> None:
    assert teacher_client.get("/teacher/students/99999/").status_code == 404
    assert teacher_client.get("/teacher/classes/99999/").status_code == 404


def test_request_log_filters_and_csv(teacher_client: Client, student: User, other_student: User,
                                     taught_class: Classroom) -> None:
    from tests.portal.test_pages import log_request

    log_request(student, model="model-a", worker_name="w1")
    log_request(other_student, model="model-b", status=429, worker_name="")
    html = teacher_client.get("/teacher/requests/?student=alice").content.decode()
    assert "model-a" in html and "model-b" not in html
    html = teacher_client.get("/teacher/requests/?status=429").content.decode()
    assert "model-b" in html and "model-a" not in html
    html = teacher_client.get("/teacher/requests/?since=not-a-date").content.decode()
    assert "Enter a valid date" in html
    csv_text = teacher_client.get("/teacher/requests/?model=model-a&format=csv").content.decode()
    assert csv_text.splitlines()[0].startswith("at,username,model")
    assert ",alice,model-a," in csv_text and "89.7" in csv_text


def test_usage_csv_export(teacher_client: Client, student: User, taught_class: Classroom) -> None:
    from tests.portal.test_pages import log_request

    from django.utils import timezone

    from inference.models import DailyUsage

    log_request(student)
    response = teacher_client.get("/teacher/usage/?format=csv")
    assert response["Content-Type"].startswith("text/csv")
    today = timezone.localdate()
    assert response.content.decode().splitlines()[1] == f"alice,7A,1,12,30,{today - timedelta(days=30)},{today}"
    DailyUsage.objects.create(day=today - timedelta(days=2), user=student, classroom=taught_class, requests=3,
                              prompt_tokens=100, completion_tokens=50)
    per_day = teacher_client.get("/teacher/usage/?format=csv&per=day").content.decode().splitlines()
    assert per_day == ["day,username,class,requests,prompt_tokens,completion_tokens",
                       f"{today - timedelta(days=2)},alice,7A,3,100,50", f"{today},alice,7A,1,12,30"]


def test_worker_actions_from_the_fleet_page(teacher_client: Client, teacher: User) -> None:
    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy")
    Pool.objects.get_or_create(name="dev")
    teacher_client.post(f"/teacher/fleet/workers/{worker.id}/drain/")
    assert Worker.objects.get(id=worker.id).state == "draining"
    teacher_client.post(f"/teacher/fleet/workers/{worker.id}/enable/")
    assert Worker.objects.get(id=worker.id).state == "starting"
    teacher_client.post(f"/teacher/fleet/workers/{worker.id}/disable/")
    assert Worker.objects.get(id=worker.id).state == "disabled"
    teacher_client.post(f"/teacher/fleet/workers/{worker.id}/move/", {"pool": "dev"})
    assert Worker.objects.get(id=worker.id).pool.name == "dev"
    response = teacher_client.post(f"/teacher/fleet/workers/{worker.id}/move/", {"pool": "nope"}, follow=True)
    assert "Choose a pool that exists" in response.content.decode()
    response = teacher_client.post(f"/teacher/fleet/workers/{worker.id}/explode/", follow=True)
    assert "Unknown action" in response.content.decode()
    assert set(AuditEvent.objects.filter(actor=teacher).values_list("action", flat=True)) >= {
        "worker.drained", "worker.enabled", "worker.disabled", "worker.moved"}


def test_students_cannot_act_on_workers(student: User) -> None:
    worker = worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production",
                             state="healthy")
    client = Client()
    client.force_login(student)
    assert client.post(f"/teacher/fleet/workers/{worker.id}/disable/").status_code == 403
    assert Worker.objects.get(id=worker.id).state == "healthy"


def test_a_cut_answers_estimated_counts_are_marked_for_the_student_and_the_teacher(
        teacher_client: Client, student: User, taught_class: Classroom) -> None:
    from django.utils import timezone

    from inference.models import RequestLog

    key, _ = key_issue(user=student)
    RequestLog.objects.create(at=timezone.now(), user=student, key=key, model="m", client="openai", path="/v1/x",
                              status=499, error_code="client_closed", prompt_tokens=310, completion_tokens=41,
                              usage_estimated=True)
    teachers_view = teacher_client.get(f"/teacher/requests/?student={student.username}").content.decode()
    own = Client()
    own.force_login(student)
    students_view = own.get("/usage/").content.decode()
    for page in (teachers_view, students_view):
        assert page.count(">≈</abbr> ") == 2 and "310" in page and "41" in page
