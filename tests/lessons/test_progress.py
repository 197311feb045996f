"""The student's progress page, the teacher's class table and its CSV say the same thing."""
from __future__ import annotations

import csv
import io

import pytest

from accounts.models import Classroom, User
from lessons.syllabus import load_catalogue
from lessons.models import Answer, StepDone

pytestmark = pytest.mark.django_db


def _finish(user, *, skip_question: str | None = None) -> None:  # noqa: ANN001
    catalogue = load_catalogue()
    for step in catalogue.steps:
        StepDone.objects.create(user=user, step=step.slug, evidence="test evidence")
    for question in catalogue.questions:
        choice = question.answer if question.id != skip_question else (question.answer + 1) % len(question.choices)
        Answer.objects.create(user=user, question=question.id, choice=choice, correct=question.id != skip_question)


def _csv(client, query: str = "") -> list[dict[str, str]]:  # noqa: ANN001
    response = client.get("/lessons/teacher/progress.csv" + query)
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_progress_page_and_teacher_views_agree(client, student, other_student, teacher) -> None:  # noqa: ANN001
    User.objects.filter(id=teacher.id).update(is_superuser=True)  # an admin: every class and the unassigned
    classroom = Classroom.objects.create(name="7b")
    student.classroom = classroom
    student.save(update_fields=["classroom"])
    _finish(student)
    _finish(other_student, skip_question="ms-yarn")  # one wrong answer: not finished

    client.force_login(student)
    mine = client.get("/lessons/progress/").content.decode()
    assert "You have finished Ground 0." in mine
    client.force_login(other_student)
    theirs = client.get("/lessons/progress/").content.decode()
    assert "Not finished yet:" in theirs and "6 of 7 lessons complete" in theirs
    assert 'data-lesson="measurement"' in theirs

    client.force_login(teacher)
    table = client.get("/lessons/teacher/").content.decode()
    section_7b = table.split(f'id="class-{classroom.id}"', 1)[1].split("</section>", 1)[0]
    assert "1 of 1 finished" in section_7b and 'data-student="alice"' in section_7b
    unassigned = table.split('id="class-none"', 1)[1].split("</section>", 1)[0]
    assert "0 of 1 finished" in unassigned and 'data-student="bob"' in unassigned

    rows = {row["username"]: row for row in _csv(client)}
    assert rows["alice"]["finished_ground0"] == "yes" and rows["alice"]["class"] == "7b"
    assert rows["bob"]["finished_ground0"] == "no" and rows["bob"]["class"] == "No class"
    assert rows["bob"]["questions_correct"] == str(int(rows["bob"]["questions_total"]) - 1)
    assert rows["bob"]["lesson:measurement"].endswith("2/3 right")
    assert [row["username"] for row in _csv(client, f"?class={classroom.id}")] == ["alice"]
    assert [row["username"] for row in _csv(client, "?class=none")] == ["bob"]
    # The burndown counts the same people as finished.
    burndown_page = client.get("/ground0/").content.decode()
    assert "Students finished Ground 0: 1 of 2" in burndown_page and "person(s)" not in burndown_page
    assert "Not finished yet: bob" in burndown_page


def test_a_student_without_progress_is_not_finished_anywhere(client, student, teacher) -> None:  # noqa: ANN001
    student.first_name = "=HYPERLINK(1)"
    student.classroom = Classroom.objects.create(name="7a")
    student.classroom.teachers.add(teacher)
    student.save(update_fields=["first_name", "classroom"])
    client.force_login(student)
    assert "Not finished yet:" in client.get("/lessons/progress/").content.decode()
    client.force_login(teacher)
    rows = _csv(client)
    assert {row["username"]: row["finished_ground0"] for row in rows} == {"alice": "no"}
    assert rows[0]["name"] == "'=HYPERLINK(1)"  # never a formula in the teacher's spreadsheet


def test_a_teacher_sees_only_their_classes_progress(client, student, other_student, teacher) -> None:  # noqa: ANN001
    mine, theirs = Classroom.objects.create(name="7b"), Classroom.objects.create(name="8c")
    mine.teachers.add(teacher)
    User.objects.filter(id=student.id).update(classroom=mine)
    User.objects.filter(id=other_student.id).update(classroom=theirs)
    client.force_login(teacher)
    table = client.get("/lessons/teacher/").content.decode()
    assert 'data-student="alice"' in table and 'data-student="bob"' not in table
    assert [row["username"] for row in _csv(client)] == ["alice"]
    assert client.get(f"/lessons/teacher/progress.csv?class={theirs.id}").status_code == 404
    assert client.get("/lessons/teacher/progress.csv?class=none").status_code == 404


def test_an_archived_class_leaves_the_progress_page(client, student, teacher) -> None:  # noqa: ANN001
    from accounts.services import classroom_archive

    mine = Classroom.objects.create(name="7b")
    mine.teachers.add(teacher)
    User.objects.filter(id=student.id).update(classroom=mine)
    client.force_login(teacher)
    assert 'data-student="alice"' in client.get("/lessons/teacher/").content.decode()
    classroom_archive(classroom=mine, archived=True, actor=teacher)
    assert 'data-student="alice"' not in client.get("/lessons/teacher/").content.decode()
