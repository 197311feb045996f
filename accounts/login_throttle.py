"""Sign-in throttling that slows an attacker without locking the school out.

Three counters of failed sign-ins, each over LOGIN_LOCK_S (the window starts at the first failure):

- per (client address, username), LOGIN_MAX_FAILURES (5): past it, that username is refused
  *from that address* until the window has passed (the right password too). A real attack on
  one account from one place stops there; the student signs in from anywhere else.
- per username, from any address, 10 x LOGIN_MAX_FAILURES (50): past it, that username is
  refused everywhere (a guess spread over many addresses). It never touches another account.
- per client address, any usernames: past 10 x LOGIN_MAX_FAILURES (a whole class signs in from
  one school NAT address, or through one tunnel), every further attempt from that address waits
  a delay that grows with the failures, up to LOGIN_SLOWDOWN_MAX_S (3 s), before it is checked.
  The address is never refused: failures with random usernames slow whoever sends them and
  their classmates a little, and lock nobody out.

The address is the real client's, behind the trusted proxies (OCS_TRUSTED_PROXIES and
OCS_CLIENT_ADDRESS_HEADER, core/client_address.py), not the proxy's own. Counters live in the
cache (Redis when REDIS_URL is set, so every gateway process shares them). `locked_usernames` lists
the usernames locked within the window and `login_clear` lifts every lock of one at once (the
`sign_in_unlock` command: `--list`, or the usernames).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from core.client_address import request_client_address as _request_client_address

USER_FACTOR = 10  # failures for one username from anywhere, in units of LOGIN_MAX_FAILURES
ADDRESS_FACTOR = 10  # failures from one address before it is slowed down
SLOWDOWN_STEP_S = 0.1  # the delay grows by this much per failure past the address allowance

sleep = time.sleep  # tests record the delays instead of waiting them


def request_client_address(request: HttpRequest) -> str | None:
    """The real client behind the trusted proxies; when it cannot be known, the peer's own
    address, so that unknown clients share one counter rather than none."""
    remote_addr = request.META.get("REMOTE_ADDR") or ""
    return _request_client_address(request.META, trusted_proxies=settings.OCS["TRUSTED_PROXIES"],
                                   client_header_name=settings.OCS["CLIENT_ADDRESS_HEADER"]) or remote_addr or None


def _name(username: str | None) -> str:
    return hashlib.sha256((username or "").strip().lower().encode()).hexdigest()[:32]


@dataclass(frozen=True)
class _Keys:
    pair: str | None
    user: str
    address: str | None


def _keys(request: HttpRequest | None, username: str | None) -> _Keys:
    name = _name(username)
    address = request_client_address(request) if request is not None else None
    generation = cache.get(f"login-gen:{name}") or 0  # bumped by login_clear: old pair counters stop counting
    return _Keys(pair=f"login-fail:pair:{generation}:{name}:{address}" if address else None,
                 user=f"login-fail:user:{name}",
                 address=f"login-fail:addr:{address}" if address else None)


def slowdown_s(failures_from_address: int, *, max_failures: int, max_delay_s: float) -> float:
    """The wait before an attempt from an address that already failed this often: none within
    its allowance (ADDRESS_FACTOR x max_failures), then SLOWDOWN_STEP_S more per failure, at most
    max_delay_s."""
    excess = failures_from_address - ADDRESS_FACTOR * max_failures
    if excess < 0:
        return 0.0
    return min(max_delay_s, SLOWDOWN_STEP_S * (excess + 1))


def login_refusal(request: HttpRequest | None, username: str | None) -> str | None:
    """Why this username may not sign in from this client now: "address" (too many failures for
    it from this address), "account" (from everywhere), or None."""
    limit = settings.OCS["LOGIN_MAX_FAILURES"]
    keys = _keys(request, username)
    if keys.pair and (cache.get(keys.pair) or 0) >= limit:
        return "address"
    if (cache.get(keys.user) or 0) >= limit * USER_FACTOR:
        return "account"
    return None


def login_locked(request: HttpRequest | None, username: str | None) -> bool:
    return login_refusal(request, username) is not None


def refusal_message(reason: str, *, remedy: str) -> str:
    minutes = max(1, round(settings.OCS["LOGIN_LOCK_S"] / 60))
    where = " from this network" if reason == "address" else ""
    return f"Too many failed sign-ins for this account{where}. Try again in {minutes} minutes, or {remedy}."


LOCKED_KEY = "login-locked"  # {username: (reason, unix time the lock ends)}, for who looks after the class


def _count(key: str, window: int) -> int:
    if cache.add(key, 1, timeout=window):
        return 1
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=window)
        return 1


def login_failed(request: HttpRequest | None, username: str | None) -> None:
    window = int(settings.OCS["LOGIN_LOCK_S"])
    limit = settings.OCS["LOGIN_MAX_FAILURES"]
    keys = _keys(request, username)
    reason = None
    if keys.pair and _count(keys.pair, window) == limit:
        reason = "address"
    if _count(keys.user, window) == limit * USER_FACTOR:
        reason = "account"
    if keys.address:
        _count(keys.address, window)
    if reason and username:
        _remember_lock(username.strip(), reason, window)


def _remember_lock(username: str, reason: str, window: int) -> None:
    """Best effort (two gateways may race): the list is for people, the counters decide."""
    now = time.time()
    locked = {name: entry for name, entry in (cache.get(LOCKED_KEY) or {}).items() if entry[1] > now}
    if len(locked) < 1000 or username in locked:
        locked[username] = (reason, now + window)
    cache.set(LOCKED_KEY, locked, timeout=window)


def locked_usernames() -> dict[str, tuple[str, float]]:
    """Usernames whose sign-in was locked within the window: {username: (reason, ends at)} with
    reason "address" (from one address) or "account" (from everywhere). Usernames that match no
    account are listed too: they show what an attacker tried."""
    now = time.time()
    return {name: entry for name, entry in (cache.get(LOCKED_KEY) or {}).items() if entry[1] > now}


def login_slow_down(request: HttpRequest | None) -> float:
    """Waits as long as this client's address has earned (slowdown_s); returns the wait in s."""
    keys = _keys(request, None)
    if keys.address is None:
        return 0.0
    delay = slowdown_s(cache.get(keys.address) or 0, max_failures=settings.OCS["LOGIN_MAX_FAILURES"],
                       max_delay_s=settings.OCS["LOGIN_SLOWDOWN_MAX_S"])
    if delay > 0:
        sleep(delay)
    return delay


def login_clear(*, username: str) -> None:
    """Lifts every sign-in lock of this username (from every address) at once."""
    name = _name(username)
    cache.delete(f"login-fail:user:{name}")
    generation_key = f"login-gen:{name}"
    cache.set(generation_key, (cache.get(generation_key) or 0) + 1, timeout=None)
    locked = cache.get(LOCKED_KEY) or {}
    if username.strip() in locked:
        del locked[username.strip()]
        cache.set(LOCKED_KEY, locked, timeout=int(settings.OCS["LOGIN_LOCK_S"]))


class ThrottledModelBackend(ModelBackend):
    """Django's username/password check, refusing locked usernames (per address and overall)
    and slowing down addresses with many failures."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: object):  # noqa: ANN201 - the user or None, as ModelBackend
        if login_locked(request, username):
            raise PermissionDenied("too many failed sign-ins")  # stops authenticate() for every backend
        login_slow_down(request)
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            login_failed(request, username)
        return user
