"""The demo starts with one class holding demo-student, taught by demo-teacher, so every class
feature (pause, class limits, budgets, the near-limit list, the landing page) can be tried at once."""
from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import Classroom
from ocsweb.management.commands.demo import DEMO_CLASS, demo_people

pytestmark = pytest.mark.django_db


def test_the_demo_puts_its_student_in_a_class_its_teacher_teaches() -> None:
    teacher, student, room = demo_people(teacher_password="t-pw-1", student_password="s-pw-1")
    assert room.name == DEMO_CLASS and student.classroom_id == room.id
    assert list(room.teachers.all()) == [teacher] and teacher.is_superuser
    client = Client()
    client.force_login(teacher)
    assert f'data-class="{DEMO_CLASS}"' in client.get("/teacher/").content.decode()


def test_a_restart_keeps_a_move_the_teacher_made() -> None:
    _teacher, student, _room = demo_people(teacher_password="t-pw-1", student_password="s-pw-1")
    elsewhere = Classroom.objects.create(name="Year 10")
    student.classroom = elsewhere
    student.save(update_fields=["classroom"])
    _teacher, student, _room = demo_people(teacher_password="t-pw-2", student_password="s-pw-2")
    assert student.classroom_id == elsewhere.id and Classroom.objects.count() == 2
