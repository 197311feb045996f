"""School sign-in in the portal, without a provider: off by default, the password path unharmed
when the provider is down, the teacher's self-enrolment switch. The flow through a real
provider is tests/browser/test_school_sign_in.py."""
from __future__ import annotations

import time

import pytest
from django.test import Client, RequestFactory

from accounts.models import AuditEvent, Classroom, User
from core.school_sign_in import SchoolSignIn
from fleet.local_worker import free_port

pytestmark = pytest.mark.django_db

BUTTON = "Sign in with your school account"


@pytest.fixture
def provider_down(settings) -> SchoolSignIn:  # noqa: ANN001
    """School sign-in configured with a provider nobody answers for (a closed loopback port)."""
    settings.SCHOOL_SIGN_IN = SchoolSignIn(issuer=f"http://127.0.0.1:{free_port()}", client_id="cid",
                                           client_secret="s", hosted_domain="school.example")
    return settings.SCHOOL_SIGN_IN


def test_off_by_default_no_button_and_no_routes(client: Client) -> None:
    assert BUTTON not in client.get("/accounts/login/").content.decode()
    assert client.get("/accounts/school/start/").status_code == 404
    assert client.get("/accounts/school/callback/?code=x&state=y").status_code == 404


def test_configured_the_sign_in_page_offers_the_school_account(client: Client, provider_down: SchoolSignIn) -> None:
    html = client.get("/accounts/login/?next=/keys/").content.decode()
    assert BUTTON in html and 'href="/accounts/school/start/?next=/keys/"' in html
    assert 'name="password"' in html  # the password path stays


def test_provider_down_refuses_school_sign_in_only(provider_down: SchoolSignIn, student: User) -> None:
    client = Client()
    response = client.get("/accounts/school/start/", follow=True)
    assert response.redirect_chain[-1][0] == "/accounts/login/"
    assert "did not work" in response.content.decode()
    signed_in = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-1"})
    assert signed_in.status_code == 302 and client.get("/").status_code == 200


def test_a_failed_school_callback_signs_nobody_in_and_counts_no_failed_password(provider_down: SchoolSignIn,
                                                                                student: User) -> None:
    """The school backend comes first and its refusal stops authenticate(): the password backend
    (which counts failures per address) never sees a school sign-in."""
    from django.core.cache import cache

    from accounts.login_throttle import _keys

    request = RequestFactory().get("/", REMOTE_ADDR="127.0.0.1")
    keys = _keys(request, None)
    before = cache.get(keys.address)  # other tests' password failures from this address may be counted
    client = Client()
    session = client.session
    session["oidc_states"] = {"st": {"nonce": "n", "code_verifier": "v" * 64, "added_on": time.time()}}
    session.save()
    response = client.get("/accounts/school/callback/?code=x&state=st", follow=True)
    assert response.redirect_chain[-1][0] == "/accounts/login/"
    assert "did not work" in response.content.decode()
    assert client.get("/").status_code == 302
    assert keys.address and cache.get(keys.address) == before


def test_teacher_turns_self_enrolment_on_for_one_class_at_a_time(provider_down: SchoolSignIn, teacher: User,
                                                                taught_class: Classroom) -> None:
    other = Classroom.objects.create(name="7B", self_enrolment=True)
    other.teachers.add(teacher)
    client = Client()
    client.force_login(teacher)
    assert "Turn self-enrolment on" in client.get(f"/teacher/classes/{taught_class.id}/").content.decode()
    response = client.post(f"/teacher/classes/{taught_class.id}/self-enrolment/", {"on": "1"}, follow=True)
    assert "New school accounts now join 7A." in response.content.decode()
    assert list(Classroom.objects.filter(self_enrolment=True)) == [taught_class]
    assert AuditEvent.objects.filter(action="class.self_enrolment", actor=teacher, subject="7A", detail="on").exists()
    client.post(f"/teacher/classes/{taught_class.id}/self-enrolment/", {"on": "0"})
    assert not Classroom.objects.filter(self_enrolment=True).exists()


def test_only_the_classes_teacher_may_switch_self_enrolment(provider_down: SchoolSignIn, student: User,
                                                            django_user_model, taught_class: Classroom) -> None:  # noqa: ANN001
    from accounts.services import user_ensure

    stranger = user_ensure(username="mr-other", role="teacher", password="pw-other-1")[0]
    as_student, as_stranger = Client(), Client()
    as_student.force_login(student)
    as_stranger.force_login(stranger)
    url = f"/teacher/classes/{taught_class.id}/self-enrolment/"
    assert as_student.post(url, {"on": "1"}).status_code == 403
    assert as_stranger.post(url, {"on": "1"}).status_code == 404
    assert not Classroom.objects.filter(self_enrolment=True).exists()


def test_a_student_signed_in_with_the_school_account_is_signed_out_once_disabled(student: User) -> None:
    client = Client()
    client.force_login(student, backend="accounts.school_sign_in.SchoolAccountBackend")
    assert client.get("/").status_code == 200
    User.objects.filter(id=student.id).update(is_active=False)
    assert client.get("/").status_code == 302
