"""Reads of usage: a student's requests and tokens today and per day, a class's per day."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from accounts.models import Classroom, User
from accounts.selectors import student_policy
from core.school_day import day_bounds
from inference.models import DailyUsage, RequestLog

# A day's totals, from RequestLog rows (the roll-up task and the students' usage page).
REQUEST_TOTALS = {
    "requests": Count("id"),
    "errors": Count("id", filter=Q(status__gte=400)),
    "prompt_tokens": Sum("prompt_tokens"),
    "completion_tokens": Sum("completion_tokens"),
}


def _per_day(rows: QuerySet[Any], **extra: Any) -> list[dict[str, Any]]:
    """DailyUsage rows summed per day, oldest first, days as ISO strings."""
    totals = rows.values("day").order_by("day").annotate(
        **extra, requests=Sum("requests"), prompt_tokens=Sum("prompt_tokens"),
        completion_tokens=Sum("completion_tokens"))
    return [{**row, "day": row["day"].isoformat()} for row in totals]


def usage_summary(user: User, *, days: int = 30) -> dict[str, Any]:
    """Today's requests and tokens (from the request log) and the daily roll-ups before it."""
    local_today = timezone.localdate()
    start_of_day, _ = day_bounds(local_today)
    today = RequestLog.objects.filter(user=user, at__gte=start_of_day).aggregate(**REQUEST_TOTALS)
    history = DailyUsage.objects.filter(user=user, day__gte=local_today - timedelta(days=days), day__lt=local_today)
    policy = student_policy(user)
    return {
        "username": user.username,
        "limits": {
            "requests_per_minute": policy.student.requests_per_minute,
            "tokens_per_day": policy.student.tokens_per_day,
            "concurrency": policy.student.concurrency,
            "allowed_models": sorted(policy.allowed_models) if policy.allowed_models else None,
            "allowed_pools": sorted(policy.allowed_pools) if policy.allowed_pools else None,
            "access_expires_at": policy.access_expires_at,
        },
        "today": {name: value or 0 for name, value in today.items()},
        "daily": _per_day(history),
    }


def class_daily_usage(classroom: Classroom, *, days: int = 30) -> list[dict[str, Any]]:
    """A class's requests and tokens per day (the sum of its students' roll-ups), oldest first."""
    rows = DailyUsage.objects.filter(classroom=classroom, day__gte=timezone.localdate() - timedelta(days=days))
    return _per_day(rows, students=Count("user", distinct=True))
