"""Sign-in rate limiting: after LOGIN_MAX_FAILURES failed attempts for one username within
LOGIN_LOCK_S, that username is refused (even with the right password) until the window has
passed. An address gets ten times as many tries: a whole class signs in from one school NAT
address, and one student's typos must not lock out the others. The address is the real
client's, behind the trusted proxies (OCS_TRUSTED_PROXIES), not the proxy's own. Counters live in the cache
(Redis when REDIS_URL is set, so every gateway process shares them)."""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from core.client_address import client_address

ADDRESS_FACTOR = 10


def request_client_address(request: HttpRequest) -> str | None:
    """The real client behind the trusted proxies (OCS_TRUSTED_PROXIES); when it cannot be known,
    the peer's own address, so that unknown clients share one counter rather than none."""
    remote_addr = request.META.get("REMOTE_ADDR") or ""
    return client_address(remote_addr=remote_addr, forwarded_for=request.META.get("HTTP_X_FORWARDED_FOR"),
                          trusted_proxies=settings.OCS["TRUSTED_PROXIES"]) or remote_addr or None


def _counters(request: HttpRequest | None, username: str | None) -> list[tuple[str, int]]:
    limit = settings.OCS["LOGIN_MAX_FAILURES"]
    name = hashlib.sha256((username or "").strip().lower().encode()).hexdigest()[:32]
    counters = [(f"login-fail:user:{name}", limit)]
    address = request_client_address(request) if request is not None else None
    if address:
        counters.append((f"login-fail:addr:{address}", limit * ADDRESS_FACTOR))
    return counters


def login_locked(request: HttpRequest | None, username: str | None) -> bool:
    return any((cache.get(key) or 0) >= limit for key, limit in _counters(request, username))


def login_failed(request: HttpRequest | None, username: str | None) -> None:
    window = int(settings.OCS["LOGIN_LOCK_S"])
    for key, _ in _counters(request, username):
        if cache.add(key, 1, timeout=window):
            continue
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=window)


class ThrottledModelBackend(ModelBackend):
    """Django's username/password check, refusing locked usernames and addresses."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: object):  # noqa: ANN201 - the user or None, as ModelBackend
        if login_locked(request, username):
            raise PermissionDenied("too many failed sign-ins")  # stops authenticate() for every backend
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            login_failed(request, username)
        return user
