"""Students see and revoke only their own keys and usage; anything else is a 404."""
from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import ApiKey, AuditEvent
from accounts.services import key_issue

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_client(student) -> Client:  # noqa: ANN001
    client = Client()
    client.force_login(student)
    return client


def test_a_new_key_is_shown_once_and_stored_only_as_a_hash(alice_client, student) -> None:  # noqa: ANN001
    created = alice_client.post("/api/me/keys", {"name": "laptop"}, content_type="application/json")
    assert created.status_code == 201
    raw = created.json()["key"]
    key = ApiKey.objects.get(id=created.json()["id"])
    assert raw.startswith(f"ocs-{key.prefix}-") and raw.rsplit("-", 1)[1] not in key.secret_hash
    listed = alice_client.get("/api/me/keys").json()
    assert [k["id"] for k in listed] == [key.id] and "key" not in listed[0]
    assert alice_client.get(f"/api/me/keys/{key.id}").json()["display"] == key.display


def test_another_students_key_and_usage_are_404_and_stay_unrevoked(alice_client, other_student) -> None:  # noqa: ANN001
    bobs_key, _ = key_issue(user=other_student)
    assert alice_client.get(f"/api/me/keys/{bobs_key.id}").status_code == 404
    assert alice_client.post(f"/api/me/keys/{bobs_key.id}/revoke").status_code == 404
    assert alice_client.get(f"/api/usage/{other_student.username}").status_code == 404
    assert alice_client.get("/api/usage/nobody-at-all").status_code == 404
    bobs_key.refresh_from_db()
    assert bobs_key.revoked_at is None
    assert all(k["owner"] == "alice" for k in alice_client.get("/api/me/keys").json())


def test_a_student_revokes_their_own_key_and_it_is_audited(alice_client, student) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    assert alice_client.post(f"/api/me/keys/{key.id}/revoke").json()["revoked_at"]
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert AuditEvent.objects.filter(action="key.revoked", actor=student, subject="alice").exists()


def test_usage_shows_the_limits_that_apply_and_a_teacher_sees_their_student(student, teacher) -> None:  # noqa: ANN001
    from accounts.models import Classroom

    student.classroom = Classroom.objects.create(name="7b", requests_per_minute=12, tokens_per_day=5000)
    student.classroom.teachers.add(teacher)
    student.tokens_per_day = 9000
    student.save()
    client = Client()
    client.force_login(teacher)
    usage = client.get("/api/usage/alice").json()
    assert usage["limits"]["requests_per_minute"] == 12 and usage["limits"]["tokens_per_day"] == 9000
    assert usage["today"] == {"requests": 0, "errors": 0, "prompt_tokens": 0, "completion_tokens": 0}


def test_the_api_needs_a_signed_in_session_not_a_password_in_a_header(student) -> None:  # noqa: ANN001
    import base64

    basic = base64.b64encode(b"alice:pw-alice-1").decode()
    assert Client().get("/api/me/keys", HTTP_AUTHORIZATION=f"Basic {basic}").status_code == 403
