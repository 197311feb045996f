"""School accounts (OpenID Connect): the configuration and the claim rule, pure.

Off unless OCS_OIDC_ISSUER is set. The school's provider is one issuer: Google Workspace
(`https://accounts.google.com`, restricted by OCS_OIDC_HOSTED_DOMAIN, Google's `hd` claim) or a
Microsoft Entra tenant (`https://login.microsoftonline.com/<tenant id>/v2.0`, restricted by
OCS_OIDC_TENANT_ID, Entra's `tid` claim). At least one restriction is required: an issuer alone
would let any Google or Microsoft account in. The flow itself is mozilla-django-oidc's
(accounts/school_sign_in.py); this module only decides. No Django imports here.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.env import ConfigError


@dataclass(frozen=True)
class SchoolSignIn:
    issuer: str
    client_id: str
    client_secret: str
    hosted_domain: str = ""  # Google Workspace: the `hd` claim must equal it
    tenant_id: str = ""  # Entra: the `tid` claim must equal it

    def django_settings(self) -> dict[str, Any]:
        """mozilla-django-oidc's settings for this provider. The endpoints and the client are not
        here: the backend and the views read them from this object and the issuer's discovery
        document, when a sign-in starts (accounts/school_sign_in.py)."""
        extra = {"hd": self.hosted_domain} if self.hosted_domain else {}  # Google's account chooser shows only the school's accounts
        return {
            "OIDC_RP_SCOPES": "openid email profile",
            "OIDC_USE_PKCE": True,
            "OIDC_AUTH_REQUEST_EXTRA_PARAMS": extra,
            "OIDC_TIMEOUT": 10,  # seconds, each call to the provider
            "OIDC_AUTHENTICATION_CALLBACK_URL": "portal:school-callback",
        }


def school_sign_in_config(*, issuer: str, client_id: str, client_secret: str, hosted_domain: str = "",
                          tenant_id: str = "") -> SchoolSignIn | None:
    """The configuration from OCS_OIDC_* (read in ocsweb/settings.py), or None (off) without an
    issuer. ConfigError, naming the variable, for what would be unsafe or cannot work."""
    issuer = issuer.strip().rstrip("/")
    if not issuer:
        return None
    if not issuer.startswith("https://") and not issuer.startswith(("http://127.0.0.1:", "http://localhost:")):
        raise ConfigError(f"OCS_OIDC_ISSUER={issuer!r} must be an https:// URL (http:// only on loopback)")
    if not client_id.strip() or not client_secret.strip():
        raise ConfigError("OCS_OIDC_ISSUER is set: OCS_OIDC_CLIENT_ID and OCS_OIDC_CLIENT_SECRET "
                          "(or OCS_OIDC_CLIENT_SECRET_FILE) must be set too")
    if not hosted_domain.strip() and not tenant_id.strip():
        raise ConfigError("OCS_OIDC_ISSUER is set: OCS_OIDC_HOSTED_DOMAIN (Google Workspace) or "
                          "OCS_OIDC_TENANT_ID (Microsoft Entra) must restrict it to the school")
    return SchoolSignIn(issuer=issuer, client_id=client_id.strip(), client_secret=client_secret.strip(),
                        hosted_domain=hosted_domain.strip().lower(), tenant_id=tenant_id.strip().lower())


# Why an account the provider vouched for is still refused, and what the student reads.
REFUSALS = {
    "wrong_school": "That account is not one of this school's. Sign in again and choose your school account.",
    "unverified": "Your school has not verified that account's email address. Ask your teacher.",
    "no_student": "There is no student here with that school account. Ask your teacher to add you.",
    "disabled": "This account is disabled. Ask your teacher.",
    "staff": "That school account is a teacher's here: teachers sign in with their username and password.",
    "ambiguous": "Two students here have that email address. Ask your teacher.",
    "provider": "Signing in with your school account did not work. Try again, or sign in with your password.",
}


def id_token_is_ours(payload: Mapping[str, Any], config: SchoolSignIn) -> bool:
    """Whether an ID token (its signature already checked) was issued by the school's provider
    for this site: `iss` is the configured issuer (Google also writes it without https://), `aud`
    names our client id, and `azp`, when present, is our client id too (OpenID Connect Core 3.1.3.7)."""
    issuers = {config.issuer} | ({"accounts.google.com"} if config.issuer == "https://accounts.google.com" else set())
    audience = payload.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    return (payload.get("iss") in issuers and config.client_id in audiences
            and payload.get("azp", config.client_id) == config.client_id)


def claims_refusal(claims: Mapping[str, Any], config: SchoolSignIn) -> str | None:
    """Why these claims (the ID token's, which win over userinfo's) may not sign in: a key of
    REFUSALS, or None. The account must belong to the school (every configured restriction holds:
    `hd` equals the hosted domain, `tid` the tenant) and carry an email its provider verified
    (`email_verified` true; Entra says it with its optional `xms_edov` claim instead)."""
    if config.hosted_domain and str(claims.get("hd") or "").lower() != config.hosted_domain:
        return "wrong_school"
    if config.tenant_id and str(claims.get("tid") or "").lower() != config.tenant_id:
        return "wrong_school"
    if not str(claims.get("email") or "").strip():
        return "unverified"
    if not _true(claims.get("email_verified")) and not _true(claims.get("xms_edov")):
        return "unverified"
    return None


def _true(value: object) -> bool:
    """A boolean claim that says true: JSON true, or the string "true" some providers send."""
    return value is True or (isinstance(value, str) and value.lower() == "true")
