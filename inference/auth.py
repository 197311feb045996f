"""Finding the API key in a request, the way each client sends it, and refusing it.

Failed key lookups (401s) are counted per client address in each gateway process, over fixed
windows of BAD_KEY_WINDOW_S; past OCS_BAD_KEY_ALLOWANCE in a window, a request from that address
whose key's prefix does not exist is refused with 429 and Retry-After before anything is looked
up. A key whose prefix exists is always checked: a valid key is never slowed, even from an
address that sent many bad ones (a school's NAT)."""
from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from accounts.key_cache import KeyIdentity, Refusal, key_lookup, prefix_exists, verify_generation
from accounts.models import ApiKey
from accounts.pause import pause_text
from core import errors
from core.api_http import Request
from core.client_address import client_address
from core.db import fresh_connection
from core.keys import parse_prefix
from core.school_day import school_time

LAST_USED_RESOLUTION_S = 60.0
_last_touched: dict[int, float] = {}
_background: set[asyncio.Task[None]] = set()


def key_from_headers(headers: Mapping[str, str]) -> str | None:
    """`Authorization: Bearer <key>` (OpenAI, Claude Code's auth token) or `x-api-key` (Anthropic)."""
    authorization = headers.get("Authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    api_key = headers.get("X-Api-Key", "").strip()
    return api_key or None


BAD_KEY_WINDOW_S = 60.0


class BadKeyCounter:
    """Failed key lookups per address over fixed windows of `window_s`; holds at most
    `max_addresses` addresses (past that it starts afresh: an attacker with that many addresses
    is not slowed by a per-address count anyway)."""

    def __init__(self, *, window_s: float = BAD_KEY_WINDOW_S, max_addresses: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s, self._max, self._clock = window_s, max_addresses, clock
        self._counts: dict[str, tuple[float, int]] = {}  # address -> (window start, failures)

    def failed(self, address: str) -> None:
        now = self._clock()
        start, count = self._counts.get(address, (now, 0))
        if now - start >= self._window_s:
            start, count = now, 0
        if len(self._counts) >= self._max and address not in self._counts:
            self._counts.clear()
        self._counts[address] = (start, count + 1)

    def retry_after_s(self, address: str, *, allowance: int) -> int | None:
        """Whole seconds until this address's window ends, when it used up its allowance; else None."""
        if allowance <= 0 or address not in self._counts:
            return None
        start, count = self._counts[address]
        left = self._window_s - (self._clock() - start)
        if left <= 0 or count < allowance:
            return None
        return max(1, math.ceil(left))


bad_keys = BadKeyCounter()


def api_client_address(request: Request) -> str | None:
    """The real client behind the trusted proxies, else the peer."""
    header = settings.OCS["CLIENT_ADDRESS_HEADER"]
    return client_address(remote_addr=request.peer, forwarded_for=request.headers.get("X-Forwarded-For"),
                          trusted_proxies=settings.OCS["TRUSTED_PROXIES"],
                          client_header=request.headers.get(header) if header else None) or request.peer or None


async def _prefix_exists(raw_key: str | None) -> bool:
    prefix = parse_prefix(raw_key) if raw_key else None
    return prefix is not None and await prefix_exists(prefix, reload_stale=False)


async def authenticate(raw_key: str | None, request: Request | None = None, *,
                       generation: int | None = None,
                       identified: Callable[[KeyIdentity], None] | None = None) -> KeyIdentity:
    """The key's identity, or invalid_api_key (401); too_many_bad_keys (429) for a request from
    an address past its allowance of failures whose key's prefix does not exist; a key whose
    owner may not use it now: account_disabled or class_paused (403). `generation`: see
    accounts.key_cache.key_lookup (the caller then verifies it with the admission).
    `identified`: told the identity as soon as the key is known, before its owner may be refused,
    so that a paused class's refusals are logged as the student's (who tried during the exam)."""
    address = api_client_address(request) if request is not None else None
    if address is not None:
        wait = bad_keys.retry_after_s(address, allowance=settings.OCS["BAD_KEY_ALLOWANCE"])
        if wait is not None and not await _prefix_exists(raw_key):
            raise errors.too_many_bad_keys(wait)
    identity = await key_lookup(raw_key, generation=generation) if raw_key else None
    if identity is None:
        if address is not None:
            bad_keys.failed(address)
        raise errors.invalid_api_key()
    if identified is not None:
        identified(identity)
    now = timezone.now()
    refused = identity.refusal(now)
    if refused is not None:
        if generation is not None:
            await verify_generation(generation)  # not refused on a cached state that has changed
        raise _refusal_error(identity, refused, now)
    _touch_last_used(identity.key_id)
    return identity


def _refusal_error(identity: KeyIdentity, refused: Refusal, now: datetime) -> errors.ApiError:
    if refused == "disabled":
        return errors.account_disabled()
    if refused == "access_ended" and identity.policy.access_expires_at is not None:
        return errors.account_disabled(ended_at=school_time(identity.policy.access_expires_at))
    if refused == "paused":
        pause = identity.paused(now)
        if pause is not None:
            return errors.class_paused(pause_text(pause, timezone.localtime(now)))
    return errors.invalid_api_key()


def _touch_last_used(key_id: int) -> None:
    """Record last use at most once a minute per key and process, off the request path."""
    now = time.monotonic()
    if now - _last_touched.get(key_id, -LAST_USED_RESOLUTION_S) < LAST_USED_RESOLUTION_S:
        return
    _last_touched[key_id] = now
    task = asyncio.ensure_future(sync_to_async(_write_last_used, thread_sensitive=False)(key_id))
    _background.add(task)
    task.add_done_callback(_background.discard)


@fresh_connection
def _write_last_used(key_id: int) -> None:
    ApiKey.objects.filter(id=key_id).update(last_used_at=timezone.now())
