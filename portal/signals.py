"""Nudges for the live fleet view when a worker changes (see portal/fleet_push.py), and the chat
page's key revoked at sign-out."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from accounts.services import chat_keys_revoke


def worker_event_saved(sender: type, instance: Any, created: bool, **kwargs: Any) -> None:
    """A worker changed state or pool. Only with Redis: the in-memory channel layer reaches no
    other process, and this process's publisher reads every second anyway."""
    if created and settings.REDIS_URL:
        from portal.fleet_push import announce_fleet_change

        transaction.on_commit(announce_fleet_change)


def chat_key_signed_out(sender: type, request: Any, user: Any, **kwargs: Any) -> None:
    """Sign-out revokes that session's chat-page key at once, in every gateway process."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if user is not None and session_key:
        chat_keys_revoke(user=user, session_key=session_key)
