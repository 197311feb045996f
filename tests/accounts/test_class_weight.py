"""A class's share weight: set by a teacher, audited, and carried with the key's identity to the
gateway's fair share (inference/admission/fair_share.py)."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from accounts.key_cache import key_authenticate
from accounts.models import AuditEvent, Classroom
from accounts.services import classroom_set_weight, key_issue


@pytest.mark.django_db(transaction=True)
def test_a_students_key_carries_their_class_weight_and_one_without_a_class_weighs_one(student, teacher) -> None:  # noqa: ANN001
    key, raw = key_issue(user=student, name="laptop")
    assert async_to_sync(key_authenticate)(raw).fair_weight == 1.0
    room = Classroom.objects.create(name="7B")
    student.classroom = room
    student.save(update_fields=["classroom"])
    assert classroom_set_weight(classroom=room, weight=2.0, actor=teacher)
    assert not classroom_set_weight(classroom=room, weight=2.0, actor=teacher)  # unchanged: no second audit row
    assert async_to_sync(key_authenticate)(raw).fair_weight == 2.0  # the change reached the key cache
    assert AuditEvent.objects.filter(action="limits.changed", subject="class 7B").count() == 1
    with pytest.raises(ValueError):
        classroom_set_weight(classroom=room, weight=0.0)
