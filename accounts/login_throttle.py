"""Sign-in throttling that slows an attacker without locking the school out.

Three counters of failed sign-ins, each over LOGIN_LOCK_S (the window starts at the first failure):

- per (client address, username), LOGIN_MAX_FAILURES (5): past it, that username is refused
  *from that address* until the window has passed (the right password too). A real attack on
  one account from one place stops there; the student signs in from anywhere else.
- per username, from any address: past 10 x LOGIN_MAX_FAILURES (50), every further attempt on
  that username waits before it is checked, 0.1 s more per failure, at most
  LOGIN_ACCOUNT_DELAY_MAX_S (10 s). The username is never refused everywhere: a guess spread over
  many addresses is slowed, and the student with the right password is signed in after that
  delay at worst, so classmates with phones and two Wi-Fi networks cannot lock them (or the
  teacher) out before a lesson. It never touches another account.
- per client address, any usernames: past 10 x LOGIN_MAX_FAILURES (a whole class signs in from
  one school NAT address, or through one tunnel), every further attempt from that address waits
  a delay that grows with the failures, up to LOGIN_SLOWDOWN_MAX_S (3 s), before it is checked.
  The address is never refused: failures with random usernames slow whoever sends them and
  their classmates a little, and lock nobody out.

The address is the real client's, behind the trusted proxies (OCS_TRUSTED_PROXIES and
OCS_CLIENT_ADDRESS_HEADER, core/client_address.py), not the proxy's own. Counters live in the
cache (Redis when REDIS_URL is set, so every gateway process shares them). `locked_usernames` lists
the usernames locked within the window and `login_clear` lifts every lock of one at once (the
`sign_in_unlock` command: `--list`, or the usernames; the Unlock button on a teacher's student page).
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

USER_FACTOR = 10  # failures for one username from anywhere before it is slowed down, in units of LOGIN_MAX_FAILURES
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


def slowdown_s(failures: int, *, max_failures: int, max_delay_s: float, factor: int = ADDRESS_FACTOR) -> float:
    """The wait before an attempt from an address (or on a username, with factor=USER_FACTOR)
    that already failed this often: none within its allowance (factor x max_failures), then
    SLOWDOWN_STEP_S more per failure, at most max_delay_s."""
    excess = failures - factor * max_failures
    if excess < 0:
        return 0.0
    return min(max_delay_s, SLOWDOWN_STEP_S * (excess + 1))


def login_refusal(request: HttpRequest | None, username: str | None) -> str | None:
    """Why this username may not sign in from this client now: "address" (too many failures for
    it from this address) or None. Failures from everywhere only slow the username down
    (login_slow_down): they never refuse it."""
    keys = _keys(request, username)
    if keys.pair and (cache.get(keys.pair) or 0) >= settings.OCS["LOGIN_MAX_FAILURES"]:
        return "address"
    return None


def login_locked(request: HttpRequest | None, username: str | None) -> bool:
    return login_refusal(request, username) is not None


def refusal_message(*, remedy: str) -> str:
    minutes = max(1, round(settings.OCS["LOGIN_LOCK_S"] / 60))
    return (f"Too many failed sign-ins for this account from this network. Try again in {minutes} minutes, "
            f"from another network, or {remedy}.")


LOCKED_KEY = "login-locked"  # {username: ("address", unix time the lock ends)}, for who looks after the class


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
    locked = keys.pair is not None and _count(keys.pair, window) == limit
    _count(keys.user, window)
    if keys.address:
        _count(keys.address, window)
    if locked and username:
        _remember_lock(username.strip(), "address", window)


def _remember_lock(username: str, reason: str, window: int) -> None:
    """Best effort (two gateways may race): the list is for people, the counters decide."""
    now = time.time()
    locked = {name: entry for name, entry in (cache.get(LOCKED_KEY) or {}).items() if entry[1] > now}
    if len(locked) < 1000 or username in locked:
        locked[username] = (reason, now + window)
    cache.set(LOCKED_KEY, locked, timeout=window)


def locked_usernames() -> dict[str, tuple[str, float]]:
    """Usernames whose sign-in was locked from some address within the window: {username:
    ("address", ends at)}. Usernames that match no account are listed too: they show what an
    attacker tried."""
    now = time.time()
    return {name: entry for name, entry in (cache.get(LOCKED_KEY) or {}).items() if entry[1] > now}


def login_slow_down(request: HttpRequest | None, username: str | None) -> float:
    """Waits as long as this client's address or this username has earned, whichever is longer
    (slowdown_s over each one's failures); returns the wait in s."""
    keys = _keys(request, username)
    max_failures = settings.OCS["LOGIN_MAX_FAILURES"]
    account_delay = slowdown_s(cache.get(keys.user) or 0, max_failures=max_failures,
                               max_delay_s=settings.OCS["LOGIN_ACCOUNT_DELAY_MAX_S"], factor=USER_FACTOR) if username else 0.0
    address_delay = slowdown_s(cache.get(keys.address) or 0, max_failures=max_failures,
                               max_delay_s=settings.OCS["LOGIN_SLOWDOWN_MAX_S"]) if keys.address else 0.0
    delay = max(account_delay, address_delay)
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
    """Django's username/password check, refusing usernames locked from this address and
    slowing down addresses and usernames with many failures."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: object):  # noqa: ANN201 - the user or None, as ModelBackend
        if login_locked(request, username):
            raise PermissionDenied("too many failed sign-ins")  # stops authenticate() for every backend
        login_slow_down(request, username)
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            login_failed(request, username)
        return user
