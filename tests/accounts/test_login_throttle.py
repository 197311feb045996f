"""Sign-in is locked per (address, username); a username or an address with many failures is
slowed down, never locked out."""
from __future__ import annotations

import secrets

import pytest
from django.conf import settings
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client

from accounts import login_throttle
from accounts.login_throttle import ADDRESS_FACTOR, USER_FACTOR, slowdown_s

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counters(settings, monkeypatch) -> list[float]:  # noqa: ANN001
    # A cache of this test's own: clear() on the Redis cache would flush a Redis other runs share.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "login-throttle-tests"}}
    cache.clear()
    waits: list[float] = []
    monkeypatch.setattr(login_throttle, "sleep", waits.append)
    return waits


@pytest.fixture
def waits(_fresh_counters) -> list[float]:  # noqa: ANN001
    return _fresh_counters


def sign_in(client: Client, username: str, password: str, path: str = "/admin/login/?next=/admin/"):  # noqa: ANN201
    return client.post(path, {"username": username, "password": password})


def test_after_too_many_failures_from_one_address_even_the_right_password_is_refused_there(teacher) -> None:  # noqa: ANN001
    client = Client()
    for _ in range(settings.OCS["LOGIN_MAX_FAILURES"]):
        assert sign_in(client, "teacher", "wrong").status_code == 200  # the form again, with an error
    locked = sign_in(client, "teacher", "pw-teacher-1")
    assert locked.status_code == 200 and b"Too many failed sign-ins for this account from this network" in locked.content
    assert "_auth_user_id" not in client.session
    # The same teacher from another address is not locked.
    assert sign_in(Client(REMOTE_ADDR="198.51.100.20"), "teacher", "pw-teacher-1").status_code == 302


def test_a_few_typos_do_not_lock_anyone_and_another_username_is_unaffected(teacher, student) -> None:  # noqa: ANN001
    client = Client()
    for _ in range(settings.OCS["LOGIN_MAX_FAILURES"] - 1):
        sign_in(client, "teacher", "wrong")
    assert sign_in(client, "teacher", "pw-teacher-1").status_code == 302
    for _ in range(settings.OCS["LOGIN_MAX_FAILURES"]):
        sign_in(Client(), "alice", "wrong")
    assert sign_in(Client(), "teacher", "pw-teacher-1").status_code == 302  # same address, other person


def test_sixty_failures_with_random_usernames_from_one_address_leave_every_student_able_to_sign_in(
        student, other_student, teacher, waits) -> None:  # noqa: ANN001
    attacker = Client()  # every test client is 127.0.0.1: one address, as one school NAT or one tunnel
    for _ in range(60):
        assert b"do not match" in sign_in(attacker, f"u{secrets.token_hex(4)}", "wrong", "/accounts/login/").content
    for username, password in (("alice", "pw-alice-1"), ("bob", "pw-bob-1"), ("teacher", "pw-teacher-1")):
        assert sign_in(Client(), username, password, "/accounts/login/").status_code == 302, username
    # Past its allowance the address was slowed down, not refused: each attempt waited longer.
    allowance = ADDRESS_FACTOR * settings.OCS["LOGIN_MAX_FAILURES"]
    assert len(waits) == 60 + 3 - allowance
    assert waits == sorted(waits) and 0 < waits[0] < waits[-1] <= settings.OCS["LOGIN_SLOWDOWN_MAX_S"]


def test_no_number_of_addresses_guessing_locks_the_right_password_out_only_delays_it(
        student, other_student, teacher, waits, settings) -> None:  # noqa: ANN001
    settings.OCS = {**settings.OCS, "LOGIN_ACCOUNT_DELAY_MAX_S": 2.0}  # reached sooner: a faster test
    # 5 wrong passwords from each of 20 addresses (100 guesses): what 10 classmates with phones and
    # two Wi-Fi networks can do before a lesson.
    limit = settings.OCS["LOGIN_MAX_FAILURES"]
    for victim in ("alice", "teacher"):
        for attempt in range(limit * 20):
            sign_in(Client(REMOTE_ADDR=f"203.0.113.{attempt // limit + 1}"), victim, "wrong", "/accounts/login/")
    waits.clear()
    for victim, password in (("alice", "pw-alice-1"), ("teacher", "pw-teacher-1")):
        owner = Client(REMOTE_ADDR="198.51.100.1")
        assert sign_in(owner, victim, password, "/accounts/login/").status_code == 302, victim
    # Signed in, after a short wait that grew with the guesses and stopped at its cap.
    assert waits == [settings.OCS["LOGIN_ACCOUNT_DELAY_MAX_S"]] * 2
    # Guessing is slowed as much: each guess waits too.
    waits.clear()
    sign_in(Client(REMOTE_ADDR="192.0.2.77"), "alice", "wrong", "/accounts/login/")
    assert waits == [settings.OCS["LOGIN_ACCOUNT_DELAY_MAX_S"]]
    # No other account is touched.
    waits.clear()
    assert sign_in(Client(REMOTE_ADDR="198.51.100.1"), "bob", "pw-bob-1", "/accounts/login/").status_code == 302
    assert waits == []


def test_the_account_delay_grows_past_its_allowance_and_is_capped() -> None:
    allowance = settings.OCS["LOGIN_MAX_FAILURES"] * USER_FACTOR
    cap = 10.0
    assert slowdown_s(allowance - 1, max_failures=settings.OCS["LOGIN_MAX_FAILURES"], max_delay_s=cap,
                      factor=USER_FACTOR) == 0.0
    grown = [slowdown_s(allowance + extra, max_failures=settings.OCS["LOGIN_MAX_FAILURES"], max_delay_s=cap,
                        factor=USER_FACTOR) for extra in (0, 10, 50, 10_000)]
    assert 0 < grown[0] < grown[1] < grown[2] <= grown[3] == cap


def test_sign_in_unlock_lists_the_locked_usernames_and_lifts_every_lock_of_one(student, capsys) -> None:  # noqa: ANN001
    for _ in range(settings.OCS["LOGIN_MAX_FAILURES"]):
        sign_in(Client(), "alice", "wrong", "/accounts/login/")
    assert b"Too many failed sign-ins" in sign_in(Client(), "alice", "pw-alice-1", "/accounts/login/").content
    call_command("sign_in_unlock", "--list")
    assert "alice: locked from one address" in capsys.readouterr().out
    call_command("sign_in_unlock", "alice")
    assert sign_in(Client(), "alice", "pw-alice-1", "/accounts/login/").status_code == 302
    call_command("sign_in_unlock", "--list")
    assert "no username is locked" in capsys.readouterr().out


def test_the_slowdown_grows_past_the_allowance_and_is_capped() -> None:
    assert slowdown_s(49, max_failures=5, max_delay_s=3.0) == 0.0
    assert 0 < slowdown_s(50, max_failures=5, max_delay_s=3.0) < slowdown_s(60, max_failures=5, max_delay_s=3.0)
    assert slowdown_s(10_000, max_failures=5, max_delay_s=3.0) == 3.0
    assert slowdown_s(10_000, max_failures=5, max_delay_s=0.0) == 0.0


@pytest.fixture
def behind_the_proxy(settings):  # noqa: ANN001, ANN201
    settings.OCS = {**settings.OCS, "TRUSTED_PROXIES": ("127.0.0.1",), "LOGIN_MAX_FAILURES": 1}


def test_behind_the_proxy_an_attack_on_one_account_stays_at_the_attackers_address(behind_the_proxy, teacher) -> None:  # noqa: ANN001
    attacker = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.66")
    sign_in(attacker, "teacher", "wrong")
    assert b"Too many failed sign-ins" in sign_in(attacker, "teacher", "pw-teacher-1").content
    # The teacher comes through the same proxy (same REMOTE_ADDR) from another address.
    teacher_client = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.20")
    assert sign_in(teacher_client, "teacher", "pw-teacher-1").status_code == 302


def test_a_forged_x_forwarded_for_does_not_escape_the_per_address_lock(behind_the_proxy, teacher) -> None:  # noqa: ANN001
    # The proxy appends the real address; the left part is whatever the attacker wrote.
    sign_in(Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="10.9.0.1, 203.0.113.66"), "teacher", "wrong")
    again = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.66")
    assert b"Too many failed sign-ins" in sign_in(again, "teacher", "pw-teacher-1").content


def test_the_tunnels_client_header_is_believed_only_from_a_trusted_proxy_when_named(behind_the_proxy, settings,  # noqa: ANN001
                                                                                   teacher) -> None:  # noqa: ANN001
    settings.OCS = {**settings.OCS, "CLIENT_ADDRESS_HEADER": "CF-Connecting-IP"}
    attacker = Client(REMOTE_ADDR="127.0.0.1", HTTP_CF_CONNECTING_IP="203.0.113.66")
    sign_in(attacker, "teacher", "wrong")
    assert b"Too many failed sign-ins" in sign_in(attacker, "teacher", "pw-teacher-1").content
    # Through the tunnel from elsewhere: another address, not locked.
    assert sign_in(Client(REMOTE_ADDR="127.0.0.1", HTTP_CF_CONNECTING_IP="198.51.100.20"),
                   "teacher", "pw-teacher-1").status_code == 302
    # Sent by a peer that is not a trusted proxy, the header is nobody's word: the peer is the client.
    cache.clear()
    forger = "203.0.113.9"
    sign_in(Client(REMOTE_ADDR=forger, HTTP_CF_CONNECTING_IP="198.51.100.1"), "teacher", "wrong")
    assert b"Too many failed sign-ins" in sign_in(Client(REMOTE_ADDR=forger, HTTP_CF_CONNECTING_IP="198.51.100.2"),
                                                  "teacher", "pw-teacher-1").content


def test_the_teacher_sees_a_students_network_lock_and_lifts_it_and_no_other_teacher_can(
        taught_class, student, teacher) -> None:  # noqa: ANN001
    from accounts.models import AuditEvent
    from accounts.services import user_ensure

    school_network = "192.0.2.10"  # the classmate who guessed and the student share it
    for _ in range(settings.OCS["LOGIN_MAX_FAILURES"]):
        sign_in(Client(REMOTE_ADDR=school_network), "alice", "wrong", "/accounts/login/")
    assert b"from this network" in sign_in(Client(REMOTE_ADDR=school_network), "alice", "pw-alice-1",
                                           "/accounts/login/").content
    page = f"/teacher/students/{student.id}/"
    unlock = f"/teacher/students/{student.id}/sign-in-unlock/"

    stranger = Client(REMOTE_ADDR="198.51.100.9")
    stranger.force_login(user_ensure(username="teacher-8b", role="teacher", password="pw-8b-teacher")[0])
    assert stranger.post(unlock).status_code == 404
    assert b"from this network" in sign_in(Client(REMOTE_ADDR=school_network), "alice", "pw-alice-1",
                                           "/accounts/login/").content

    own = Client(REMOTE_ADDR="198.51.100.9")
    own.force_login(teacher)
    assert b"Sign-in locked from one network" in own.get(page).content
    assert own.post(unlock).status_code == 302
    assert b"Sign-in locked from one network" not in own.get(page).content
    assert AuditEvent.objects.filter(action="student.sign_in_unlocked", subject="alice").exists()
    assert sign_in(Client(REMOTE_ADDR=school_network), "alice", "pw-alice-1", "/accounts/login/").status_code == 302
