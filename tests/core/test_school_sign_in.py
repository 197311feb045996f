"""School sign-in's configuration and rules, pure (core/school_sign_in.py); the flow itself
against a real provider is tests/browser/test_school_sign_in.py."""
from __future__ import annotations

import pytest

from core.env import ConfigError
from core.school_sign_in import SchoolSignIn, claims_refusal, id_token_is_ours, school_sign_in_from_env

GOOGLE = SchoolSignIn(issuer="https://accounts.google.com", client_id="cid", client_secret="s",
                      hosted_domain="school.example")
ENTRA = SchoolSignIn(issuer="https://login.microsoftonline.com/t1/v2.0", client_id="cid", client_secret="s",
                     tenant_id="t1")
BASE = {"OCS_OIDC_ISSUER": "https://accounts.google.com/", "OCS_OIDC_CLIENT_ID": "cid", "OCS_OIDC_CLIENT_SECRET": "s"}


def test_off_unless_an_issuer_is_set() -> None:
    assert school_sign_in_from_env({}) is None
    assert school_sign_in_from_env({"OCS_OIDC_CLIENT_ID": "cid"}) is None


def test_configured_from_the_environment() -> None:
    config = school_sign_in_from_env({**BASE, "OCS_OIDC_HOSTED_DOMAIN": "School.Example"})
    assert config == SchoolSignIn(issuer="https://accounts.google.com", client_id="cid", client_secret="s",
                                  hosted_domain="school.example")
    assert config.django_settings()["OIDC_AUTH_REQUEST_EXTRA_PARAMS"] == {"hd": "school.example"}


@pytest.mark.parametrize(("environ", "names"), [
    (BASE, "OCS_OIDC_HOSTED_DOMAIN"),  # an issuer alone would let every Google account in
    ({**BASE, "OCS_OIDC_CLIENT_SECRET": "", "OCS_OIDC_TENANT_ID": "t"}, "OCS_OIDC_CLIENT_SECRET"),
    ({**BASE, "OCS_OIDC_ISSUER": "http://idp.school.example", "OCS_OIDC_TENANT_ID": "t"}, "https://"),
])
def test_incomplete_or_unsafe_configuration_stops_start_up(environ: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        school_sign_in_from_env(environ)


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
