"""Teachers set limits from the command line or the admin; both are audited and reach the
gateway's key cache at once."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command

from accounts.key_cache import key_authenticate
from accounts.models import AuditEvent, Classroom
from accounts.services import key_issue
from tests.accounts.test_audit import admin_client

pytestmark = pytest.mark.django_db(transaction=True)


def policy_of(raw: str):  # noqa: ANN201
    identity = async_to_sync(key_authenticate)(raw)
    assert identity is not None
    return identity.policy


def test_set_limits_changes_only_what_is_given_and_the_next_request_sees_it(student, capsys) -> None:  # noqa: ANN001
    _key, raw = key_issue(user=student)
    before = policy_of(raw).student  # cached by the gateway now
    call_command("set_limits", "alice", "--rpm", "5", "--tokens-per-day", "1000")
    student.refresh_from_db()
    assert (student.requests_per_minute, student.tokens_per_day, student.concurrency) == (5, 1000, None)
    after = policy_of(raw).student
    assert (after.requests_per_minute, after.tokens_per_day) == (5, 1000) != (before.requests_per_minute,
                                                                              before.tokens_per_day)
    assert after.concurrency == before.concurrency  # not given: inherited as before
    event = AuditEvent.objects.get(action="limits.changed")
    assert event.subject == "alice" and "requests_per_minute=5" in event.detail
    assert "updated" in capsys.readouterr().out


def test_inherit_clears_a_field_and_a_class_sets_its_students_defaults(student) -> None:  # noqa: ANN001
    _key, raw = key_issue(user=student)
    call_command("set_limits", "alice", "--rpm", "5")
    call_command("set_limits", "--class", "7b", "--rpm", "9", "--concurrency", "2")
    student.classroom = Classroom.objects.get(name="7b")
    student.save()
    call_command("set_limits", "alice", "--rpm", "inherit")
    caps = policy_of(raw).student
    assert (caps.requests_per_minute, caps.concurrency) == (9, 2)
    assert AuditEvent.objects.filter(action="limits.changed", subject="class 7b").exists()


def test_a_keys_own_limits_and_bad_input(student) -> None:  # noqa: ANN001
    key, raw = key_issue(user=student)
    call_command("set_limits", "alice", "--key", key.display.removesuffix("…"), "--concurrency", "1")
    assert policy_of(raw).key is not None and policy_of(raw).key.concurrency == 1
    with pytest.raises(CommandError, match="no user"):
        call_command("set_limits", "nobody", "--rpm", "1")
    with pytest.raises(CommandError, match="nothing to change"):
        call_command("set_limits", "alice")


def test_a_teacher_edits_limits_in_the_admin_and_it_is_audited(teacher, student) -> None:  # noqa: ANN001
    _key, raw = key_issue(user=student)
    policy_of(raw)  # cached
    client = admin_client(teacher)
    data = {"username": "alice", "role": "student", "is_active": "on", "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00", "initial-date_joined_0": "2026-01-01", "initial-date_joined_1": "00:00:00",
            "requests_per_minute": "3", "tokens_per_day": "", "concurrency": "", "allowed_models": "",
            "allowed_pools": ""}
    response = client.post(f"/admin/accounts/user/{student.id}/change/", data)
    assert response.status_code == 302, response.content[:800]
    assert policy_of(raw).student.requests_per_minute == 3
    assert AuditEvent.objects.filter(action="limits.changed", actor=teacher, subject="alice").exists()
    page = client.get(f"/admin/accounts/user/{student.id}/change/").content.decode()
    assert "Requests per minute" in page and "inherit" in page


def test_the_teachers_admin_pages_for_classes_usage_and_the_request_log_render(teacher, student) -> None:  # noqa: ANN001
    from django.utils import timezone

    from inference.models import RequestLog
    from inference.tasks import rollup_usage

    RequestLog.objects.create(at=timezone.now(), user=student, model="m", client="openai",
                              path="/v1/chat/completions", status=200, prompt_tokens=3, completion_tokens=2)
    rollup_usage()
    client = admin_client(teacher)
    for page in ("/admin/accounts/classroom/add/", "/admin/inference/requestlog/", "/admin/inference/dailyusage/"):
        response = client.get(page)
        assert response.status_code == 200, page
    assert "alice" in client.get("/admin/inference/dailyusage/").content.decode()
    created = client.post("/admin/accounts/classroom/add/", {"name": "8a", "fair_weight": "1.0",
                                                             "requests_per_minute": "15",
                                                             "tokens_per_day": "", "concurrency": "",
                                                             "allowed_models": "", "allowed_pools": ""})
    assert created.status_code == 302
    assert AuditEvent.objects.filter(action="limits.changed", subject="class 8a", actor=teacher).exists()
