"""What a person may see about keys and usage: their own, or, for a teacher, anyone's."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Count, QuerySet, Sum
from django.utils import timezone

from accounts.key_cache import site_defaults
from accounts.limits import UNSET, Policy, resolve
from accounts.models import ApiKey, Classroom, User
from ocsweb.lib.school_day import day_bounds


def keys_visible_to(viewer: User) -> QuerySet[ApiKey]:
    keys = ApiKey.objects.select_related("user", "pool")
    return keys if viewer.is_teacher else keys.filter(user=viewer)


def people_visible_to(viewer: User) -> QuerySet[User]:
    return User.objects.all() if viewer.is_teacher else User.objects.filter(id=viewer.id)


def student_policy(user: User) -> Policy:
    """The limits that apply to the student (before any key of theirs adds its own)."""
    return resolve(defaults=site_defaults(), classroom=user.classroom, student=user, key=UNSET,
                   access_expires_at=user.access_expires_at)


def _per_day(rows: QuerySet[Any], **extra: Any) -> list[dict[str, Any]]:
    """DailyUsage rows summed per day, oldest first, days as ISO strings."""
    totals = rows.values("day").order_by("day").annotate(
        **extra, requests=Sum("requests"), prompt_tokens=Sum("prompt_tokens"),
        completion_tokens=Sum("completion_tokens"))
    return [{**row, "day": row["day"].isoformat()} for row in totals]


def usage_summary(user: User, *, days: int = 30) -> dict[str, Any]:
    """Today's requests and tokens (from the request log) and the daily roll-ups before it."""
    from inference.models import DailyUsage, RequestLog
    from inference.tasks import REQUEST_TOTALS

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
    from inference.models import DailyUsage

    rows = DailyUsage.objects.filter(classroom=classroom, day__gte=timezone.localdate() - timedelta(days=days))
    return _per_day(rows, students=Count("user", distinct=True))
