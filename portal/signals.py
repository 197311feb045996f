"""Nudges for the live fleet view when a worker changes (see portal/fleet_push.py)."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction


def worker_event_saved(sender: type, instance: Any, created: bool, **kwargs: Any) -> None:
    """A worker changed state or pool. Only with Redis: the in-memory channel layer reaches no
    other process, and this process's publisher reads every second anyway."""
    if created and settings.REDIS_URL:
        from portal.fleet_push import announce_fleet_change

        transaction.on_commit(announce_fleet_change)
