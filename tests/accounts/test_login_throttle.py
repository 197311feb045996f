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


@pytest.fixture
def behind_the_proxy(settings):  # noqa: ANN001, ANN201
    # One failure per username: the address limit (10) is reached in a few seconds.
    settings.OCS = {**settings.OCS, "TRUSTED_PROXIES": ("127.0.0.1",), "LOGIN_MAX_FAILURES": 1}


def test_behind_the_proxy_one_address_locked_out_does_not_lock_out_everyone(behind_the_proxy, teacher) -> None:  # noqa: ANN001
    from accounts.login_throttle import ADDRESS_FACTOR

    attacker = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.66")
    for attempt in range(settings.OCS["LOGIN_MAX_FAILURES"] * ADDRESS_FACTOR):
        sign_in(attacker, f"nobody-{attempt}", "wrong")
    assert b"Too many failed sign-ins" in sign_in(attacker, "teacher", "pw-teacher-1").content  # that address is locked
    # The teacher comes through the same proxy (same REMOTE_ADDR) from another address.
    teacher_client = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.20")
    assert sign_in(teacher_client, "teacher", "pw-teacher-1").status_code == 302


def test_a_forged_x_forwarded_for_does_not_escape_the_address_limit(behind_the_proxy, teacher) -> None:  # noqa: ANN001
    from accounts.login_throttle import ADDRESS_FACTOR

    for attempt in range(settings.OCS["LOGIN_MAX_FAILURES"] * ADDRESS_FACTOR):
        # The proxy appends the real address; the left part is whatever the attacker wrote.
        forged = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=f"10.9.{attempt}.1, 203.0.113.66")
        sign_in(forged, f"nobody-{attempt}", "wrong")
    again = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.66")
    assert b"Too many failed sign-ins" in sign_in(again, "teacher", "pw-teacher-1").content
