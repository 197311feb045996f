"""School sign-in's configuration and rules, pure (core/school_sign_in.py); the flow itself
against a real provider is tests/browser/test_school_sign_in.py."""
from __future__ import annotations

import pytest

from core.env import ConfigError
from core.school_sign_in import SchoolSignIn, claims_refusal, id_token_is_ours, school_sign_in_config

GOOGLE = SchoolSignIn(issuer="https://accounts.google.com", client_id="cid", client_secret="s",
                      hosted_domain="school.example")
ENTRA = SchoolSignIn(issuer="https://login.microsoftonline.com/t1/v2.0", client_id="cid", client_secret="s",
                     tenant_id="t1")
BASE = {"issuer": "https://accounts.google.com/", "client_id": "cid", "client_secret": "s"}


def test_off_unless_an_issuer_is_set() -> None:
    assert school_sign_in_config(issuer="", client_id="", client_secret="") is None
    assert school_sign_in_config(issuer=" ", client_id="cid", client_secret="s", hosted_domain="d") is None


def test_configured_from_the_environment() -> None:
    config = school_sign_in_config(**BASE, hosted_domain="School.Example")
    assert config == SchoolSignIn(issuer="https://accounts.google.com", client_id="cid", client_secret="s",
                                  hosted_domain="school.example")
    assert config.django_settings()["OIDC_AUTH_REQUEST_EXTRA_PARAMS"] == {"hd": "school.example"}


@pytest.mark.parametrize(("given", "names"), [
    (BASE, "OCS_OIDC_HOSTED_DOMAIN"),  # an issuer alone would let every Google account in
    ({**BASE, "client_secret": "", "tenant_id": "t"}, "OCS_OIDC_CLIENT_SECRET"),
    ({**BASE, "issuer": "http://idp.school.example", "tenant_id": "t"}, "https://"),
])
def test_incomplete_or_unsafe_configuration_stops_start_up(given: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        school_sign_in_config(**given)


VERIFIED = {"email": "ada@school.example", "email_verified": True}


@pytest.mark.parametrize(("config", "claims", "reason"), [
    (GOOGLE, {**VERIFIED, "hd": "school.example"}, None),
    (GOOGLE, {**VERIFIED, "hd": "SCHOOL.example"}, None),
    (GOOGLE, {**VERIFIED, "hd": "other.example"}, "wrong_school"),
    (GOOGLE, VERIFIED, "wrong_school"),  # a consumer Gmail account has no hd
    (GOOGLE, {**VERIFIED, "hd": "school.example", "email_verified": False}, "unverified"),
    (GOOGLE, {**VERIFIED, "hd": "school.example", "email_verified": "false"}, "unverified"),
    (GOOGLE, {"email": "ada@school.example", "hd": "school.example"}, "unverified"),
    (GOOGLE, {"email_verified": True, "hd": "school.example"}, "unverified"),  # no email to match
    (ENTRA, {"email": "tia@school.example", "tid": "t1", "xms_edov": True}, None),
    (ENTRA, {"email": "tia@school.example", "tid": "t2", "xms_edov": True}, "wrong_school"),
    (ENTRA, {"email": "tia@school.example", "tid": "t1"}, "unverified"),
])
def test_only_the_schools_verified_accounts_pass(config: SchoolSignIn, claims: dict[str, object],
                                                 reason: str | None) -> None:
    assert claims_refusal(claims, config) == reason


@pytest.mark.parametrize(("payload", "ours"), [
    ({"iss": "https://accounts.google.com", "aud": "cid", "azp": "cid"}, True),
    ({"iss": "accounts.google.com", "aud": ["cid", "other"]}, True),
    ({"iss": "https://accounts.google.com", "aud": "another-site"}, False),
    ({"iss": "https://accounts.google.com", "aud": "cid", "azp": "another-site"}, False),
    ({"iss": "https://evil.example", "aud": "cid"}, False),
])
def test_an_id_token_for_another_site_or_from_another_issuer_is_not_ours(payload: dict[str, object],
                                                                         ours: bool) -> None:
    assert id_token_is_ours(payload, GOOGLE) is ours
