"""Page defects from issue 21 (item 5) that a Django test client can pin: the set-password page
names the username, the request log filters by part of a username and by class, teachers land
on their classes and find the lessons' progress page in their menu, pages name a favicon."""
from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import Classroom, User
from portal.services import set_password_path
from tests.portal.test_pages import log_request

pytestmark = pytest.mark.django_db


def test_the_set_password_page_shows_the_username_to_sign_in_with() -> None:
    ada = User.objects.create(username="ada.l", first_name="Ada")
    ada.set_unusable_password()
    ada.save()
    page = Client().get(set_password_path(user=ada), follow=True).content.decode()
    assert 'data-testid="username">ada.l<' in page


def test_the_request_log_filters_by_part_of_a_username_and_by_class(teacher, taught_class, student,
                                                                   other_student) -> None:  # noqa: ANN001
    log_request(student, model="model-alice")
    log_request(other_student, model="model-bob")
    elsewhere = Classroom.objects.create(name="8B")
    elsewhere.teachers.add(teacher)
    carol = User.objects.create(username="carol", classroom=elsewhere)
    log_request(carol, model="model-carol")
    client = Client()
    client.force_login(teacher)
    html = client.get("/teacher/requests/?student=LIC").content.decode()
    assert "model-alice" in html and "model-bob" not in html
    html = client.get("/teacher/requests/?classroom=8b").content.decode()
    assert "model-carol" in html and "model-alice" not in html and "model-bob" not in html


def test_teachers_land_on_their_classes_and_students_on_their_home(teacher, student) -> None:  # noqa: ANN001
    for username, password, landing in (("teacher", "pw-teacher-1", "/teacher/"), ("alice", "pw-alice-1", "/")):
        response = Client().post("/accounts/login/", {"username": username, "password": password})
        assert response.status_code == 302 and response["Location"] == landing
    with_next = Client().post("/accounts/login/?next=/keys/", {"username": "teacher", "password": "pw-teacher-1"})
    assert with_next["Location"] == "/keys/"


def test_the_teacher_menu_links_the_lessons_progress_and_pages_name_a_favicon(teacher) -> None:  # noqa: ANN001
    client = Client()
    client.force_login(teacher)
    html = client.get("/teacher/").content.decode()
    assert 'href="/lessons/teacher/"' in html
    assert 'rel="icon"' in html and "favicon.svg" in html


def test_empty_limit_fields_show_what_they_inherit(teacher, taught_class, student) -> None:  # noqa: ANN001
    from accounts.services import limits_set

    limits_set(target=taught_class, tokens_per_week=50_000, allowed_models="tiny")
    client = Client()
    client.force_login(teacher)
    student_page = client.get(f"/teacher/students/{student.id}/").content.decode()
    assert 'placeholder="inherits: 50,000"' in student_page and 'placeholder="inherits: tiny"' in student_page
    class_page = client.get(f"/teacher/classes/{taught_class.id}/").content.decode()
    assert 'placeholder="inherits: 60"' in class_page  # the site's default requests per minute
