"""Teacher actions leave audit rows, whichever way they are taken (service, admin form, admin action)."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from accounts.key_cache import key_authenticate
from accounts.models import AuditEvent, User
from accounts.services import key_issue, key_revoke
from fleet.models import Pool
from fleet.services import worker_drain, worker_move, worker_register

pytestmark = pytest.mark.django_db(transaction=True)


def admin_client(teacher: User) -> Client:
    teacher.is_superuser = True
    teacher.save(update_fields=["is_superuser"])
    client = Client()
    client.force_login(teacher)
    return client


def test_services_record_who_did_what(teacher, student) -> None:  # noqa: ANN001
    key, _raw = key_issue(user=student, name="laptop")
    key_revoke(key=key, actor=teacher)
    key_revoke(key=key, actor=teacher)  # already revoked: no second row
    worker = worker_register(name="w1", base_url="http://10.0.0.1:8080", model_id="m", pool_name="production",
                             state="healthy")
    worker_move(worker=worker, pool=Pool.objects.get_or_create(name="dev")[0], actor=teacher)
    worker_drain(worker=worker)  # from the command line: no actor
    rows = list(AuditEvent.objects.order_by("at", "id").values_list("actor__username", "action", "subject"))
    assert rows == [("teacher", "key.revoked", "alice"), ("teacher", "worker.moved", "w1"),
                    (None, "worker.drained", "w1")]


def test_unticking_active_in_the_admin_stops_the_students_keys_at_once(teacher, student) -> None:  # noqa: ANN001
    _key, raw = key_issue(user=student)
    assert async_to_sync(key_authenticate)(raw) is not None  # cached now
    client = admin_client(teacher)
    form = client.get(f"/admin/accounts/user/{student.id}/change/")
    assert form.status_code == 200
    data = {"username": student.username, "role": "student", "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00", "initial-date_joined_0": "2026-01-01", "initial-date_joined_1": "00:00:00"}
    response = client.post(f"/admin/accounts/user/{student.id}/change/", data)  # is_active left unticked
    assert response.status_code == 302, response.content[:500]
    assert async_to_sync(key_authenticate)(raw) is None
    assert AuditEvent.objects.filter(action="student.disabled", subject="alice", actor=teacher).exists()


def test_admin_actions_on_workers_and_keys_are_audited(teacher, student) -> None:  # noqa: ANN001
    key, _raw = key_issue(user=student)
    worker = worker_register(name="w2", base_url="http://10.0.0.2:8080", model_id="m", pool_name="production",
                             state="healthy")
    client = admin_client(teacher)
    client.post("/admin/fleet/worker/", {"action": "action_drained", "_selected_action": [worker.id]})
    client.post("/admin/accounts/apikey/", {"action": "revoke", "_selected_action": [key.id]})
    worker.refresh_from_db()
    key.refresh_from_db()
    assert worker.state == "draining" and key.revoked_at is not None
    assert set(AuditEvent.objects.filter(actor=teacher).values_list("action", flat=True)) == {
        "worker.drained", "key.revoked"}
