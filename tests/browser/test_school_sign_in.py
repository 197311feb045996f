"""School accounts, end to end: Chromium signs in through a real OpenID Connect provider
(panva's oidc-provider on loopback, tests/oidc/provider.mjs, installed by
scripts/ensure_oidc_provider.sh) to a real gateway configured only by its OCS_OIDC_* environment.
The provider issues the claims a school's Google Workspace (`hd`) or Entra tenant (`tid`,
`xms_edov`) would, matching and not; nothing of the protocol is faked."""
from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import SCREENSHOTS
from tests.conftest import ROOT, Gateway, free_port, start_gateway, stop_process

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]

PROVIDER_DIR = ROOT / "tests" / "oidc"
CLIENT_ID, CLIENT_SECRET = "ocs-test", "a-client-secret-for-the-test-provider"
ACCOUNTS = {
    "ada@school.example": {"email_verified": True, "hd": "school.example", "name": "Ada Lovelace"},
    "eve@other.example": {"email_verified": True, "hd": "other.example"},
    "uma@school.example": {"email_verified": False, "hd": "school.example"},
    "nia@school.example": {"email_verified": True, "hd": "school.example", "name": "Nia Obi"},
    "tia@school.example": {"xms_edov": True, "tid": "11111111-aaaa", "name": "Tia Entra"},
    "tom@school.example": {"xms_edov": True, "tid": "22222222-bbbb"},
}


def start_provider(tmp: Path, redirect_uri: str) -> tuple[subprocess.Popen[bytes], str]:
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("the test OpenID Connect provider is not installed: run scripts/ensure_oidc_provider.sh")
    accounts = tmp / "accounts.json"
    accounts.write_text(json.dumps(ACCOUNTS))
    port = free_port()
    log = open(tmp / "provider.log", "ab")
    process = subprocess.Popen(
        ["node", str(PROVIDER_DIR / "provider.mjs")], cwd=PROVIDER_DIR, stdout=log, stderr=subprocess.STDOUT,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "OIDC_PORT": str(port), "OIDC_CLIENT_ID": CLIENT_ID,
             "OIDC_CLIENT_SECRET": CLIENT_SECRET, "OIDC_REDIRECT_URI": redirect_uri,
             "OIDC_ACCOUNTS": str(accounts)})
    issuer = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the test provider exited: {(tmp / 'provider.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=1).status_code == 200:
                return process, issuer
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    pytest.fail("the test provider did not start within 30 s")


@pytest.fixture(scope="module")
def school(django_db_blocker, tmp_path_factory) -> Iterator[dict[str, Gateway]]:  # noqa: ANN001
    """The provider and two gateways trusting it: "google" restricted to the hosted domain
    school.example, "entra" to the tenant 11111111-aaaa (the same provider plays both)."""
    tmp = tmp_path_factory.mktemp("school")
    ports = {"google": free_port(), "entra": free_port()}
    provider, issuer = start_provider(tmp, ",".join(
        f"http://127.0.0.1:{port}/accounts/school/callback/" for port in ports.values()))
    restriction = {"google": {"OCS_OIDC_HOSTED_DOMAIN": "school.example"},
                   "entra": {"OCS_OIDC_TENANT_ID": "11111111-AAAA"}}
    gateways: dict[str, Gateway] = {}
    try:
        with django_db_blocker.unblock():
            for name, port in ports.items():
                gateways[name] = start_gateway(tmp / f"gateway-{name}.log", port, OCS_OIDC_ISSUER=issuer,
                                               OCS_OIDC_CLIENT_ID=CLIENT_ID, OCS_OIDC_CLIENT_SECRET=CLIENT_SECRET,
                                               **restriction[name])
        yield gateways
    finally:
        for gateway in gateways.values():
            stop_process(gateway.process)
        stop_process(provider, timeout_s=5)


def school_sign_in(page: Any, gateway: Gateway, email: str) -> None:
    """The student's way: the sign-in page's button, the school's page, back to the portal."""
    page.goto(f"{gateway.url}/accounts/login/")
    page.click("text=Sign in with your school account")
    page.fill("#email", email)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: url.startswith(gateway.url))
    page.wait_for_load_state()


def refusal(page: Any) -> str:
    assert page.url.split("?")[0].endswith("/accounts/login/"), page.url
    assert page.locator("input[name=username]").count() == 1  # the password path stays
    return str(page.inner_text(".messages"))


@pytest.fixture
def ada(transactional_db):  # noqa: ANN001, ANN201
    from accounts.services import user_ensure

    user = user_ensure(username="ada", role="student", password="pw-ada-12345")[0]
    user.email = "Ada@School.example"  # as the class list had it: matched without case
    user.save(update_fields=["email"])
    return user


def test_imported_student_signs_in_with_the_school_account_and_lands_on_the_portal(school, ada, new_page) -> None:  # noqa: ANN001
    page = new_page()
    school_sign_in(page, school["google"], "ada@school.example")
    assert page.url == f"{school['google'].url}/"
    assert page.inner_text(".account .who") == "ada"
    page.goto(f"{school['google'].url}/keys/")  # a real session: a signed-in page opens
    assert page.url == f"{school['google'].url}/keys/"


def test_account_of_another_domain_is_refused(school, ada, new_page) -> None:  # noqa: ANN001
    page = new_page()
    school_sign_in(page, school["google"], "eve@other.example")
    assert "not one of this school's" in refusal(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "school-sign-in-refused.png"), full_page=True)


def test_account_whose_email_is_not_verified_is_refused_though_it_matches(school, ada, new_page) -> None:  # noqa: ANN001
    from accounts.models import User

    User.objects.filter(id=ada.id).update(email="uma@school.example")
    page = new_page()
    school_sign_in(page, school["google"], "uma@school.example")
    assert "has not verified" in refusal(page)


def test_in_domain_account_without_a_student_is_told_to_ask_the_teacher(school, ada, new_page) -> None:  # noqa: ANN001
    from accounts.models import User

    page = new_page()
    school_sign_in(page, school["google"], "nia@school.example")
    assert "Ask your teacher to add you" in refusal(page)
    assert not User.objects.filter(email="nia@school.example").exists()


def test_with_self_enrolment_on_a_new_school_account_joins_that_class(school, ada, new_page) -> None:  # noqa: ANN001
    from accounts.models import AuditEvent, Classroom, User
    from accounts.school_sign_in import classroom_set_self_enrolment

    room = Classroom.objects.create(name="8C")
    classroom_set_self_enrolment(classroom=room, on=True)
    page = new_page()
    school_sign_in(page, school["google"], "nia@school.example")
    assert page.url == f"{school['google'].url}/"
    nia = User.objects.get(email="nia@school.example")
    assert (nia.username, nia.classroom_id, nia.is_staff, nia.get_full_name()) == ("nia", room.id, False, "Nia Obi")
    assert page.inner_text(".account .who") == "nia"
    assert AuditEvent.objects.filter(action="student.self_enrolled", subject="nia").exists()


def test_entra_tenant_signs_its_own_in_and_refuses_another_tenant(school, transactional_db, new_page) -> None:  # noqa: ANN001
    from accounts.services import user_ensure

    for username in ("tia", "tom"):
        user = user_ensure(username=username, role="student", password=f"pw-{username}-12345")[0]
        user.email = f"{username}@school.example"
        user.save(update_fields=["email"])
    page = new_page()
    school_sign_in(page, school["entra"], "tom@school.example")
    assert "not one of this school's" in refusal(page)
    page = new_page()  # a fresh browser: the provider would remember tom
    school_sign_in(page, school["entra"], "tia@school.example")
    assert page.url == f"{school['entra'].url}/"
    assert page.inner_text(".account .who") == "tia"


def test_disabled_student_and_teachers_address_are_refused(school, ada, teacher, new_page) -> None:  # noqa: ANN001
    from accounts.models import Classroom, User
    from accounts.school_sign_in import classroom_set_self_enrolment

    User.objects.filter(id=ada.id).update(is_active=False)
    page = new_page()
    school_sign_in(page, school["google"], "ada@school.example")
    assert "This account is disabled" in refusal(page)

    # A teacher's account never signs in through here, nor gets a student twin by self-enrolment.
    User.objects.filter(id=teacher.id).update(email="nia@school.example")
    classroom_set_self_enrolment(classroom=Classroom.objects.create(name="8C"), on=True)
    page = new_page()
    school_sign_in(page, school["google"], "nia@school.example")
    assert "teachers sign in with their username and password" in refusal(page)
    assert list(User.objects.filter(email="nia@school.example")) == [teacher]
