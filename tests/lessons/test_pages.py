"""Every lesson renders for anonymous, student and teacher; pages that are not yours answer 404."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.utils.html import escape

from lessons import syllabus as catalogue_module
from lessons import views
from lessons.syllabus import load_catalogue, parse_catalogue
from tests.lessons.test_render import assert_inert

LESSONS = load_catalogue().lessons
pytestmark = pytest.mark.django_db


@pytest.fixture
def as_student(client, student):  # noqa: ANN001, ANN201
    client.force_login(student)
    return client


@pytest.fixture
def as_teacher(client, teacher):  # noqa: ANN001, ANN201
    client.force_login(teacher)
    return client


@pytest.mark.parametrize("who", ["anonymous", "student", "teacher"])
@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_every_lesson_renders_for_everyone(client, student, teacher, who: str, lesson) -> None:  # noqa: ANN001
    if who != "anonymous":
        client.force_login(student if who == "student" else teacher)
    page = client.get(f"/lessons/{lesson.slug}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert escape(lesson.title) in html
    assert f"lessons/{lesson.diagram}" in html and escape(lesson.diagram_alt) in html
    for question in lesson.questions:
        assert f'id="question-{question.id}"' in html
    assert 'id="live-panel"' in html
    assert "/lessons/summary/" in html  # every lesson links to the teachable summary
    if who == "anonymous":
        assert "Sign in" in html and 'type="submit">Check' not in html
    else:
        assert 'name="csrfmiddlewaretoken"' in html


@pytest.mark.parametrize("who", ["anonymous", "student", "teacher"])
def test_index_and_summary_render(client, student, teacher, who: str) -> None:  # noqa: ANN001
    if who != "anonymous":
        client.force_login(student if who == "student" else teacher)
    index = client.get("/lessons/").content.decode()
    assert all(f"/lessons/{lesson.slug}/" in index for lesson in LESSONS)
    assert "Finished Ground 0" in index
    summary = client.get("/lessons/summary/")
    assert summary.status_code == 200 and "Ground 0" in summary.content.decode()


def test_a_lesson_file_with_a_script_renders_inert(client, monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    (tmp_path / "evil.md").write_text("# Evil\n\n<script>document.title='owned'</script>\n\n"
                                      "<img src=x onerror=alert(1)> [x](javascript:alert(1))\n")
    static = catalogue_module.STATIC_DIR
    data = {"lesson": [{"slug": "evil", "title": "Evil", "summary": "s", "file": str(tmp_path / "evil.md"),
                        "diagram": "api.svg", "diagram_alt": "alt", "panel": "installation",
                        "question": [{"id": "e1", "text": "?", "choices": ["a", "b"], "answer": 0, "explain": "e"},
                                     {"id": "e2", "text": "?", "choices": ["a", "b"], "answer": 1, "explain": "e"}]}]}
    evil = parse_catalogue(data, content_dir=tmp_path, static_dir=static)
    monkeypatch.setattr(views, "load_catalogue", lambda: evil)
    html = client.get("/lessons/evil/").content.decode()
    body = html.split('id="lesson-body">', 1)[1].split("</article>", 1)[0]
    assert_inert(body)
    assert "&lt;script&gt;document.title" in body


def test_unknown_lesson_step_or_question_is_404(as_student) -> None:  # noqa: ANN001
    assert as_student.get("/lessons/no-such-lesson/").status_code == 404
    assert as_student.post("/lessons/api/steps/no-such-step/").status_code == 404
    assert as_student.post("/lessons/api/questions/no-such/", {"choice": 0}).status_code == 404
    assert as_student.post("/lessons/api/steps/measure-ttft/").status_code == 404  # a step of another lesson


def test_teacher_pages_are_for_staff_only(client, student, teacher) -> None:  # noqa: ANN001
    for url in ("/lessons/teacher/", "/lessons/teacher/progress.csv"):
        anonymous = client.get(url)
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    client.force_login(student)
    refused = client.get("/lessons/teacher/")
    assert refused.status_code == 403 and "for teachers" in refused.content.decode()
    assert client.get("/lessons/teacher/progress.csv").status_code == 403
    assert client.post("/ground0/contracts/tick/").status_code == 403
    client.force_login(teacher)
    assert client.get("/lessons/teacher/").status_code == 200
    assert client.get("/lessons/teacher/progress.csv?class=99999").status_code == 404
    assert client.get("/lessons/teacher/progress.csv?class=abc").status_code == 404


def test_signed_in_pages_send_anonymous_people_to_sign_in(client) -> None:  # noqa: ANN001
    for url in ("/lessons/progress/", "/ground0/"):
        page = client.get(url)
        assert page.status_code == 302 and page["Location"].startswith("/accounts/login/?next=")
    assert client.post("/lessons/api/questions/api-503/", {"choice": 0}).status_code == 302
    assert client.get("/lessons/fleet.json").status_code == 401


def test_bad_input_gets_a_message_not_an_error(as_student) -> None:  # noqa: ANN001
    for choice in ("", "x", "99", "-1"):
        page = as_student.post("/lessons/api/questions/api-503/", {"choice": choice}, follow=True)
        assert page.status_code == 200 and "Pick one of the answers" in page.content.decode()
    for value in ("abc", "-5", "1e9", "nan"):
        page = as_student.post("/lessons/measurement/steps/measure-ttft/", {"ttft_ms": value}, follow=True)
        assert page.status_code == 200
        assert "milliseconds" in page.content.decode()
    assert as_student.get("/lessons/api/questions/api-503/").status_code == 405


def test_the_admin_lists_steps_answers_and_ticks(admin_client, student) -> None:  # noqa: ANN001
    from lessons.models import Answer, ManualCheck, StepDone

    StepDone.objects.create(user=student, step="watch-fleet", evidence="seen")
    Answer.objects.create(user=student, question="api-503", choice=0, correct=True)
    ManualCheck.objects.create(deliverable="contracts", note="ok")
    for model in ("stepdone", "answer", "manualcheck", "fleetsighting"):
        page = admin_client.get(f"/admin/lessons/{model}/")
        assert page.status_code == 200, model
    assert "watch-fleet" in admin_client.get("/admin/lessons/stepdone/").content.decode()
