"""Lesson 2's path lab, run: the site runs the `verify_path` checks (research/path_verify.py) for
a student against this deployment, on the runs task cluster (one measurement at a time, as the
roofline lab's and /research/start/'s runs: a class pressing Run together does not load every
worker at once), with a key issued to the student for this run only (so the requests are theirs:
their pool, their limits) and revoked at the end whatever happens. One run per student at a time;
the results are stored redacted, as verify_path prints them, and with no worker's address
(students never see those).

The address checked is the one the student's browser reached (Django's validated Host, so only a
name in OCS_ALLOWED_HOSTS), never one the student types.
"""
from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import User
from accounts.services import key_issue, key_revoke
from core.redact import redact
from lessons.models import PathLab
from research.path_check import verdict
from lessons.path_lab import hide_addresses
from research.path_verify import registered_workers, verify

CHECK_TIMEOUT_S = 20.0  # per hop; the whole run takes seconds on a healthy deployment
STALE_AFTER_S = 300  # a run still queued or running after this was lost with its task cluster


class PathLabRefused(ValueError):
    """A run that cannot start now; the message is for the student."""


def path_lab_start(*, user: User, base_url: str) -> PathLab:
    """Record the run and hand it to the task cluster once the row is committed."""
    stale = timezone.now() - timedelta(seconds=STALE_AFTER_S)
    PathLab.objects.filter(user=user, status__in=(PathLab.Status.QUEUED, PathLab.Status.RUNNING),
                           at__lt=stale).update(status=PathLab.Status.FAILED, ended_at=timezone.now(),
                                                error="the task cluster stopped before the check finished")
    if PathLab.objects.filter(user=user, status__in=(PathLab.Status.QUEUED, PathLab.Status.RUNNING)).exists():
        raise PathLabRefused("Your path check is still running: reload this page in a few seconds.")
    lab = PathLab.objects.create(user=user, base_url=base_url.rstrip("/")[:255])
    transaction.on_commit(lambda: _enqueue(lab.pk))
    return lab


def _enqueue(lab_id: int) -> None:
    from django_q.tasks import async_task

    async_task("lessons.path_runs.path_lab_execute", lab_id, cluster=settings.OCS_RUNS_CLUSTER,
               task_name=f"path-lab-{lab_id}")


def path_lab_execute(lab_id: int) -> str:
    """The task: run the checks as the student and store what they found. Returns the status."""
    taken = PathLab.objects.filter(pk=lab_id, status=PathLab.Status.QUEUED).update(status=PathLab.Status.RUNNING)
    lab = PathLab.objects.select_related("user").get(pk=lab_id)
    if not taken:
        return lab.status  # delivered twice: one run only
    key = None
    try:
        key, raw = key_issue(user=lab.user, name=f"path-lab-{lab.pk}", enforce_limit=False)
        results, _timings = verify(base_url=lab.base_url, api_key=raw, timeout_s=CHECK_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - the student sees the run failed, not a stuck "running"
        PathLab.objects.filter(pk=lab_id).update(status=PathLab.Status.FAILED, ended_at=timezone.now(),
                                                 error=redact(f"{type(exc).__name__}: {exc}")[:500])
        return PathLab.Status.FAILED
    finally:
        if key is not None:
            key_revoke(key=key)
    _, line = verdict(results)
    addresses = [worker.base_url for worker in registered_workers()]
    stored = hide_addresses([asdict(result) for result in results], addresses)
    shown_line = str(hide_addresses([{"detail": line}], addresses)[0]["detail"])
    PathLab.objects.filter(pk=lab_id).update(status=PathLab.Status.DONE, ended_at=timezone.now(),
                                             verdict=shown_line[:500], results=stored)
    return PathLab.Status.DONE
