"""django-q2 entry points for the request log: daily roll-ups and pruning. Schedules are created
by migration inference/0002; `manage.py qcluster` runs them."""
from __future__ import annotations

from datetime import date, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from accounts.models import User
from core.school_day import day_bounds
from inference.models import DailyUsage, RequestLog
from inference.selectors import REQUEST_TOTALS


def rollup_day(day: date) -> int:
    """(Re)compute DailyUsage for one day of the school's time zone from the request log;
    idempotent. Returns the number of (student, model) rows."""
    start, end = day_bounds(day)
    totals = (
        RequestLog.objects.filter(at__gte=start, at__lt=end, user__isnull=False)
        .values("user_id", "model")
        .annotate(**REQUEST_TOTALS, cached_tokens=Sum("cached_tokens"))
    )
    classrooms = dict(User.objects.filter(id__in={t["user_id"] for t in totals}).values_list("id", "classroom_id"))
    rows = [
        DailyUsage(day=day, user_id=t["user_id"], classroom_id=classrooms.get(t["user_id"]), model=t["model"],
                   requests=t["requests"], errors=t["errors"], prompt_tokens=t["prompt_tokens"] or 0,
                   completion_tokens=t["completion_tokens"] or 0, cached_tokens=t["cached_tokens"] or 0)
        for t in totals
    ]
    with transaction.atomic():
        DailyUsage.objects.filter(day=day).delete()
        DailyUsage.objects.bulk_create(rows)
    return len(rows)


def rollup_usage() -> int:
    """Today and yesterday (a request near midnight may be logged a moment after it)."""
    today = timezone.localdate()
    return rollup_day(today - timedelta(days=1)) + rollup_day(today)


def prune_request_log() -> int:
    """Delete request rows past the retention; their days stay in DailyUsage. Days that will
    be pruned are rolled up first, so no usage is lost even if the roll-up schedule was down."""
    cutoff = timezone.now() - timedelta(days=settings.OCS["REQUEST_LOG_RETENTION_DAYS"])
    oldest = RequestLog.objects.filter(at__lt=cutoff).order_by("at").values_list("at", flat=True).first()
    if oldest is None:
        return 0
    day = timezone.localtime(oldest).date()
    while day <= timezone.localtime(cutoff).date():
        if not DailyUsage.objects.filter(day=day).exists():
            rollup_day(day)
        day += timedelta(days=1)
    deleted, _ = RequestLog.objects.filter(at__lt=cutoff).delete()
    return deleted
