"""Finding the API key in a request, the way each client sends it."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import datetime

from asgiref.sync import sync_to_async
from django.utils import timezone

from accounts.key_cache import KeyIdentity, Refusal, key_lookup
from accounts.models import ApiKey
from accounts.pause import pause_text
from core import errors
from core.db import fresh_connection
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


async def authenticate(raw_key: str | None) -> KeyIdentity:
    if not raw_key:
        raise errors.invalid_api_key()
    identity = await key_lookup(raw_key)
    if identity is None:
        raise errors.invalid_api_key()
    now = timezone.now()
    refused = identity.refusal(now)
    if refused is not None:
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
