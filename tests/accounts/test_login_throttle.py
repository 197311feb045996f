"""Sign-in is throttled per username (and, more loosely, per address)."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    cache.clear()


def sign_in(client: Client, username: str, password: str):  # noqa: ANN201
    return client.post("/admin/login/?next=/admin/", {"username": username, "password": password})


def test_after_too_many_failures_even_the_right_password_is_refused_with_a_clear_message(teacher) -> None:  # noqa: ANN001
    client = Client()
    for _ in range(settings.OCS["LOGIN_MAX_FAILURES"]):
        assert sign_in(client, "teacher", "wrong").status_code == 200  # the form again, with an error
    locked = sign_in(client, "teacher", "pw-teacher-1")
    assert locked.status_code == 200 and b"Too many failed sign-ins" in locked.content
    assert "_auth_user_id" not in client.session


def test_a_few_typos_do_not_lock_anyone_and_another_username_is_unaffected(teacher, student) -> None:  # noqa: ANN001
    client = Client()
    for _ in range(settings.OCS["LOGIN_MAX_FAILURES"] - 1):
        sign_in(client, "teacher", "wrong")
    assert sign_in(client, "teacher", "pw-teacher-1").status_code == 302
    for _ in range(settings.OCS["LOGIN_MAX_FAILURES"]):
        sign_in(Client(), "alice", "wrong")
    assert sign_in(Client(), "teacher", "pw-teacher-1").status_code == 302  # same address, other person
