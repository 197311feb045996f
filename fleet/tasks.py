"""django-q2 entry points: the slow, periodic sweeps (the fast probe loop is fleet_monitor).
Schedules are created by migration fleet/0003; `manage.py qcluster` runs them."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from fleet.models import PoolEvent, WorkerEvent
from fleet.rigs import rigs_sweep_silent


def sweep_silent_rigs() -> list[str]:
    return rigs_sweep_silent(silent_after_s=settings.OCS["RIG_SILENT_S"])


def prune_events() -> int:
    cutoff = timezone.now() - timedelta(days=settings.OCS["EVENT_RETENTION_DAYS"])
    deleted_workers, _ = WorkerEvent.objects.filter(at__lt=cutoff).delete()
    deleted_pools, _ = PoolEvent.objects.filter(at__lt=cutoff).delete()
    return deleted_workers + deleted_pools
