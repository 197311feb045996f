"""Authenticating a raw API key on the hot path without a database query per request.

Entries are cached per process by key prefix. An entry is used only while
- it is younger than KEY_CACHE_TTL_S (the bound when another process changed a key and could
  not reach this one), and
- the live "keys" generation is unchanged: revoking a key, disabling a student or changing
  limits bumps it, in Redis for every gateway process, so the change holds on the next request
  everywhere.
Unknown keys cost no query each: a prefix is looked up only if it is among the prefixes that
exist, a set each process loads once and reloads only when
- the live "keys-issued" generation changed (key_issue bumps it, in Redis for every process, so
  a freshly issued key works at once everywhere), or
- the stamp file OCS_VAR_DIR/keys-issued changed (key_issue touches it too: without Redis, the
  live state is each process's own, and `manage.py issue_key` is another process), or
- a prefix it does not hold comes and the set is older than KEY_CACHE_TTL_S (the bound when the
  process that issued a key could reach neither).
Any number of well-formed unknown keys costs at most one query (`SELECT prefix`) per
KEY_CACHE_TTL_S per process; a key that exists never waits for a reload.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from accounts.limits.resolution import Caps, Policy, resolve
from accounts.models import Classroom
from accounts.pause import ActivePause, PauseRule, Window, active_pause
from core.db import fresh_connection
from core.keys import hash_matches, parse_prefix
from core.live import LiveStateUnavailable, live_state

log = logging.getLogger(__name__)
GENERATION = "keys"
ISSUED_GENERATION = "keys-issued"
Refusal = Literal["key", "disabled", "access_ended", "paused"]


@dataclass(frozen=True)
class KeyIdentity:
    """What the gateway needs to know about a key's owner; no secret in it."""

    key_id: int
    prefix: str
    user_id: int
    username: str
    pool_id: int
    pool_name: str
    secret_hash: str
    expires_at: datetime | None
    revoked: bool
    user_active: bool
    policy: Policy
    is_staff: bool = False  # a teacher or operator: may pin a request to a worker (X-OCS-Worker)
    fair_weight: float = 1.0  # the class's share weight (inference/admission/fair_share.py); 1 without a class
    pause: PauseRule | None = None  # the student's class's pauses (staff are never paused)

    def usable(self, now: datetime) -> bool:
        return self.refusal(now) is None

    def refusal(self, now: datetime) -> Refusal | None:
        """Why this key may not be used now, or None. "key": revoked or expired, the same answer
        as an unknown key; "disabled" / "access_ended": the owner's account (a new key would not
        help, so the gateway says so)."""
        if self.revoked or (self.expires_at is not None and self.expires_at <= now):
            return "key"
        if not self.user_active:
            return "disabled"
        if self.policy.access_expires_at is not None and self.policy.access_expires_at <= now:
            return "access_ended"
        if self.paused(now) is not None:
            return "paused"
        return None

    def paused(self, now: datetime) -> ActivePause | None:
        return active_pause(self.pause, timezone.localtime(now))


def site_defaults() -> Caps:
    """The OCS_DEFAULT_* settings; 0 means no cap."""
    return Caps(
        requests_per_minute=settings.OCS["DEFAULT_REQUESTS_PER_MINUTE"] or None,
        tokens_per_day=settings.OCS["DEFAULT_TOKENS_PER_DAY"] or None,
        concurrency=settings.OCS["DEFAULT_CONCURRENCY"] or None,
    )


_cache: dict[str, tuple[KeyIdentity, float, int]] = {}
# Loads in flight, by (prefix, generation): when a key's entry expires, every request that
# carries it at that moment waits for one query (a class's agents send many at once; 32 streams
# made 32 identical queries a second on PostgreSQL, 13 % of the gateway's time: docs/performance.md).
_loading: dict[tuple[str, int], asyncio.Future[KeyIdentity | None]] = {}


def class_pause_rule(room: Classroom | None) -> PauseRule | None:
    """What can pause `room`'s students: its one-off pause and its weekly windows (one query)."""
    if room is None:
        return None
    windows = tuple(Window(w.weekday, w.starts, w.ends, w.message) for w in room.pause_windows.all())
    if not room.paused and not windows:
        return None
    by = (room.paused_by.get_full_name() or room.paused_by.username) if room.paused_by else ""
    return PauseRule(class_name=room.name, starts=room.pause_starts, until=room.pause_until, active=room.paused,
                     by=by, message=room.pause_message, windows=windows, lifted_until=room.pause_lifted_until)


@fresh_connection
def _load(prefix: str) -> KeyIdentity | None:
    from accounts.models import ApiKey

    key = ApiKey.objects.select_related("user", "user__classroom", "user__classroom__paused_by", "pool").filter(
        prefix=prefix).first()
    if key is None:
        return None
    return KeyIdentity(
        key_id=key.id,
        prefix=key.prefix,
        user_id=key.user_id,
        username=key.user.username,
        pool_id=key.pool_id,
        pool_name=key.pool.name,
        secret_hash=key.secret_hash,
        expires_at=key.expires_at,
        revoked=key.revoked_at is not None,
        user_active=key.user.is_active,
        is_staff=key.user.is_staff,
        fair_weight=key.user.classroom.fair_weight if key.user.classroom is not None else 1.0,
        pause=None if key.user.is_staff else class_pause_rule(key.user.classroom),
        policy=resolve(defaults=site_defaults(), classroom=key.user.classroom, student=key.user, key=key,
                       access_expires_at=key.user.access_expires_at,
                       term=key.user.classroom.term if key.user.classroom else None),
    )


@dataclass(frozen=True)
class _Prefixes:
    known: frozenset[str]
    loaded_at: float  # time.monotonic()
    generation: tuple[int, int]  # the live "keys-issued" generation, the stamp file's mtime


def _stamp_path() -> Path:
    return Path(settings.VAR_DIR) / "keys-issued"


def _stamp() -> int:
    try:
        return _stamp_path().stat().st_mtime_ns
    except OSError:
        return 0


_prefixes: _Prefixes | None = None
_prefixes_lock = threading.Lock()


@fresh_connection
def _load_prefixes(generation: tuple[int, int], stale_before: float) -> _Prefixes:
    """The prefixes that exist; one query, unless another thread loaded them meanwhile."""
    global _prefixes
    from accounts.models import ApiKey

    with _prefixes_lock:
        current = _prefixes
        if current is not None and current.generation == generation and current.loaded_at >= stale_before:
            return current
        loaded_at = time.monotonic()
        current = _Prefixes(frozenset(ApiKey.objects.values_list("prefix", flat=True)), loaded_at, generation)
        _prefixes = current
        return current


async def prefix_exists(prefix: str, *, reload_stale: bool = True) -> bool:
    """Whether a key with this prefix may exist, with no query unless the set of prefixes is out
    of date: a key was issued since (any process), or, with `reload_stale`, it is older than
    KEY_CACHE_TTL_S and does not hold this prefix."""
    if prefix in _cache:
        return True
    current = _prefixes
    if current is not None and prefix in current.known:
        return True
    generation = (await live_state().generation(ISSUED_GENERATION), _stamp())
    now = time.monotonic()
    ttl = settings.OCS["KEY_CACHE_TTL_S"]
    if current is not None and current.generation == generation and (not reload_stale or now - current.loaded_at < ttl):
        return False
    current = await sync_to_async(_load_prefixes, thread_sensitive=False)(generation, now - ttl)
    return prefix in current.known


def key_prefixes_changed() -> None:
    """Called when a key is issued: every process reloads its set of prefixes on the next
    unknown one. Without the live state the other processes still see the key within
    KEY_CACHE_TTL_S: the key is issued all the same."""
    try:
        live_state().bump_generation(ISSUED_GENERATION)
    except LiveStateUnavailable as exc:
        log.warning("new key not announced to the other processes: %s", exc)
    try:
        now = time.time_ns()
        _stamp_path().touch()
        os.utime(_stamp_path(), ns=(now, now))
    except OSError as exc:
        log.warning("new key not announced through %s: %s", _stamp_path(), exc)


async def key_authenticate(raw: str) -> KeyIdentity | None:
    """The identity behind a raw key, or None if it is malformed, unknown, revoked or expired,
    or its owner may not use it now."""
    identity = await key_lookup(raw)
    if identity is None or not identity.usable(timezone.now()):
        return None
    return identity


class StaleIdentity(Exception):
    """The "keys" generation read together with a request's admission is not the one its identity
    was checked against: a key or a limit changed meanwhile, in some process. The request is
    authenticated again, from the database (inference/pipeline.py)."""

    def __init__(self, generation: int) -> None:
        super().__init__(f"keys generation is now {generation}")
        self.generation = generation


# The latest "keys" generation this process read from live state. A request may authenticate
# against it without reading the generation first, provided its admission reads the generation
# in the same round trip and finds it unchanged (accounts/limits/gate.py: StaleIdentity if not),
# so a revocation still holds on the very next request in every process.
_seen_generation: int | None = None


def seen_generation() -> int | None:
    return _seen_generation


def note_generation(value: int | None) -> None:
    global _seen_generation
    _seen_generation = value


async def verify_generation(generation: int) -> None:
    """Before refusing on an identity checked against `generation` without reading it (a pause,
    a disabled account, a model not allowed): read it; StaleIdentity if it moved."""
    current = await live_state().generation(GENERATION)
    if current != generation:
        raise StaleIdentity(current)


async def key_lookup(raw: str, *, generation: int | None = None) -> KeyIdentity | None:
    """The identity behind a raw key whose secret matches, usable or not (see
    KeyIdentity.refusal); None if it is malformed or unknown or the secret is wrong.
    `generation`: the "keys" generation to check the cached entry against, when the caller
    verifies it with the admission (see _seen_generation); None: read it now."""
    prefix = parse_prefix(raw)
    if prefix is None:
        return None
    if generation is None:
        generation = await live_state().generation(GENERATION)
        note_generation(generation)
    cached = _cache.get(prefix)
    now = time.monotonic()
    identity: KeyIdentity | None
    if cached and cached[2] == generation and now - cached[1] < settings.OCS["KEY_CACHE_TTL_S"]:
        identity = cached[0]
    else:
        if not await prefix_exists(prefix):
            return None
        identity = await _load_once(prefix, generation)
        if identity is None:
            _cache.pop(prefix, None)
            return None
        _cache[prefix] = (identity, now, generation)
    if not hash_matches(raw, identity.secret_hash):
        return None
    return identity


async def _load_once(prefix: str, generation: int) -> KeyIdentity | None:
    """_load(prefix), once for all the requests of this event loop that need it now. A request
    that leaves while it waits does not cancel the load for the others."""
    key, loop = (prefix, generation), asyncio.get_running_loop()
    pending = _loading.get(key)
    if pending is None or pending.done() or pending.get_loop() is not loop:
        pending = asyncio.ensure_future(sync_to_async(_load, thread_sensitive=False)(prefix))
        _loading[key] = pending

        def forget(done: asyncio.Future[KeyIdentity | None]) -> None:
            if _loading.get(key) is done:
                del _loading[key]
            if not done.cancelled():
                done.exception()  # retrieved: a failure is raised to its waiters, not logged as lost

        pending.add_done_callback(forget)
    return await asyncio.shield(pending)


def key_cache_invalidate(*, prefix: str | None = None) -> None:
    """Called after a key (or, with no prefix, any limit) changes: drops it here and tells every
    other gateway process."""
    if prefix is None:
        _cache.clear()
    else:
        _cache.pop(prefix, None)
    note_generation(None)  # this process's next request reads the generation first
    live_state().bump_generation(GENERATION)
