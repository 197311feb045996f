"""School accounts: sign-in with the school's Google Workspace or Microsoft Entra tenant.

The protocol is mozilla-django-oidc's (the authorization code flow with PKCE, the nonce, the
ID token's signature against the provider's JWKS); this module adds what a school needs:

- the provider's endpoints come from its discovery document (`provider_metadata`), fetched when a
  sign-in starts, not at start-up: a provider that is down refuses school sign-in only, never the
  password path or a signed-in page;
- the ID token's `iss` and `aud` are checked (the library leaves both unchecked);
- the claims must pass `core.school_sign_in.claims_refusal` (the school's `hd`/`tid`, a verified
  email); the ID token's claims win over userinfo's;
- the account is matched by email to a student (never a teacher or staff account: those sign in
  with their password); an account that matches none joins the class whose teacher turned
  self-enrolment on (`classroom_set_self_enrolment`), else is refused ("ask your teacher").

A refusal raises PermissionDenied, which stops Django's authenticate() for every backend: the
password backend never counts a school sign-in as a failed password. Its reason (a key of
`core.school_sign_in.REFUSALS`) is left on the request as `school_sign_in_refusal`.
"""
from __future__ import annotations

import logging
import re
import time
from typing import Any

import httpx
import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from accounts.audit import audit_record
from accounts.models import Classroom, User
from core.school_sign_in import SchoolSignIn, claims_refusal, id_token_is_ours

log = logging.getLogger(__name__)

REFUSAL_ATTR = "school_sign_in_refusal"
DISCOVERY_TTL_S = 3600.0


class ProviderUnavailable(Exception):
    """The school's provider could not be asked (down, or its discovery document is wrong)."""


_metadata: dict[str, tuple[float, dict[str, Any]]] = {}  # issuer -> (expires at, monotonic s; document)


def school_config() -> SchoolSignIn | None:
    config = getattr(settings, "SCHOOL_SIGN_IN", None)
    return config if isinstance(config, SchoolSignIn) else None


def school_setting(attr: str, *default: Any) -> Any:
    """A mozilla-django-oidc setting: the school's (SchoolSignIn.django_settings) first, then
    Django's settings, so that OCS_OIDC_* is the one place it is configured."""
    config = school_config()
    derived = config.django_settings() if config is not None else {}
    if attr in derived:
        return derived[attr]
    return import_from_settings(attr, *default)


def provider_metadata(issuer: str) -> dict[str, Any]:
    """The issuer's OpenID Connect discovery document, cached per process for an hour. Its
    `issuer` must be the configured one (OpenID Connect Discovery 1.0, section 4.3)."""
    cached = _metadata.get(issuer)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    try:
        response = httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=10.0)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ProviderUnavailable(f"{issuer}: discovery failed: {exc}") from exc
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        raise ProviderUnavailable(f"{issuer}: the discovery document names another issuer")
    missing = [name for name in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(name)]
    if missing:
        raise ProviderUnavailable(f"{issuer}: the discovery document lacks {', '.join(missing)}")
    _metadata[issuer] = (time.monotonic() + DISCOVERY_TTL_S, document)
    return document


def refuse(request: HttpRequest, reason: str) -> PermissionDenied:
    setattr(request, REFUSAL_ATTR, reason)
    return PermissionDenied(f"school sign-in refused: {reason}")


def _username_for(email: str) -> str:
    """The email's local part, lower-cased, in Django's username alphabet; a number is appended
    while it is taken."""
    base = re.sub(r"[^a-z0-9._+-]", "", email.split("@", 1)[0].lower())[:140] or "student"
    name, n = base, 1
    while User.objects.filter(username=name).exists():
        n += 1
        name = f"{base}{n}"
    return name


def classroom_set_self_enrolment(*, classroom: Classroom, on: bool, actor: User | None = None) -> bool:
    """Turn a class's self-enrolment on or off (audited as "class.self_enrolment"). On for one
    class turns it off for every other: a new school account must have one class to join.
    Returns whether anything changed."""
    with transaction.atomic():
        if on:
            Classroom.objects.filter(self_enrolment=True).exclude(id=classroom.id).update(self_enrolment=False)
        if classroom.self_enrolment == on:
            return False
        classroom.self_enrolment = on
        classroom.save(update_fields=["self_enrolment"])
        audit_record(actor=actor, action="class.self_enrolment", subject=classroom.name, detail="on" if on else "off")
    return True


def student_self_enrol(*, email: str, name: str, classroom: Classroom) -> User:
    """A new student from a school account, in `classroom`; no password (they sign in with the
    school account; a teacher's set-password link can give one). Audited as "student.self_enrolled"."""
    with transaction.atomic():
        first, _, last = name.partition(" ")
        user = User.objects.create_user(_username_for(email), email=email, first_name=first[:150],
                                        last_name=last[:150], role=User.Role.STUDENT, classroom=classroom)
        audit_record(actor=None, action="student.self_enrolled", subject=user.username,
                     detail=f"{email} joined {classroom.name} with a school account")
    return user


class SchoolAccountBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with the school's rules. Acts only on the callback of a
    school sign-in (the library's view passes `nonce`); the password path passes it by."""

    get_settings = staticmethod(school_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library reads the endpoints here; they are properties below, read on use, so that
        # loading this backend (every request of a signed-in session) never asks the provider.
        self.UserModel = get_user_model()

    @property
    def _config(self) -> SchoolSignIn:
        config = school_config()
        if config is None:
            raise PermissionDenied("school sign-in is off")
        return config

    def _endpoint(self, name: str) -> str:
        return str(provider_metadata(self._config.issuer).get(name) or "")

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802 - the library's attribute names
        return self._endpoint("token_endpoint")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:  # noqa: N802
        return self._endpoint("userinfo_endpoint")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:  # noqa: N802
        return self._endpoint("jwks_uri")

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:  # noqa: N802
        return self._config.client_id

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:  # noqa: N802
        return self._config.client_secret

    OIDC_RP_SIGN_ALGO = "RS256"  # Google's and Entra's ID tokens
    OIDC_RP_IDP_SIGN_KEY = None

    def get_user(self, user_id: int) -> User | None:
        """The session's user while the account is active: the library's own drops Django's
        check, and a student the teacher disabled would stay signed in."""
        user = super().get_user(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        if request is None or "nonce" not in kwargs or school_config() is None:
            return None
        try:
            user = super().authenticate(request, **kwargs)
        except (ProviderUnavailable, requests.RequestException, SuspiciousOperation, jwt.PyJWTError,
                KeyError, ValueError) as exc:
            log.warning("school sign-in failed: %s", exc)
            raise refuse(request, "provider") from exc
        if user is None:
            raise refuse(request, getattr(request, REFUSAL_ATTR, "provider"))
        if not user.is_active:
            raise refuse(request, "disabled")
        return user

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        if "nonce" not in kwargs:  # a signed userinfo answer, not the ID token
            return payload
        if not id_token_is_ours(payload, self._config):
            raise SuspiciousOperation("the ID token was issued by another provider or for another client")
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        userinfo = super().get_userinfo(access_token, id_token, payload) if self.OIDC_OP_USER_ENDPOINT else {}
        return {**userinfo, **payload}  # the signed ID token's hd/tid/email_verified win

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        reason = claims_refusal(claims, self._config)
        if reason:
            log.info("school sign-in refused (%s): %s", reason, claims.get("email"))
            raise refuse(self.request, reason)
        return True

    def filter_users_by_claims(self, claims: dict[str, Any]) -> QuerySet[User]:
        email = str(claims.get("email") or "").strip()
        students = User.objects.filter(email__iexact=email, role=User.Role.STUDENT, is_staff=False,
                                       is_superuser=False, is_replay=False)
        if students.count() > 1:
            raise refuse(self.request, "ambiguous")
        return students

    def create_user(self, claims: dict[str, Any]) -> User:
        email = str(claims["email"]).strip()
        if User.objects.filter(email__iexact=email).exists():  # a teacher's or staff account's address
            raise refuse(self.request, "staff")
        classroom = Classroom.objects.filter(self_enrolment=True).order_by("id").first()
        if classroom is None:
            raise refuse(self.request, "no_student")
        name = str(claims.get("name") or " ".join(
            str(claims.get(part) or "") for part in ("given_name", "family_name"))).strip()
        try:
            return student_self_enrol(email=email, name=name, classroom=classroom)
        except IntegrityError:  # another sign-in took the same username meanwhile: the next free one
            return student_self_enrol(email=email, name=name, classroom=classroom)
