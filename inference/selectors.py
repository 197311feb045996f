"""Reads of usage: a student's requests and tokens today and per day, a class's per day."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from accounts.models import Classroom, User
from accounts.limits.live_quota import quota_live
from accounts.selectors import student_policy
from core.live import LiveStateUnavailable
from core.school_day import day_bounds, this_term, this_week, today
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
            "tokens_per_week": policy.student.tokens_per_week,
            "tokens_per_term": policy.student.tokens_per_term,
            "concurrency": policy.student.concurrency,
            "allowed_models": sorted(policy.allowed_models) if policy.allowed_models else None,
            "allowed_pools": sorted(policy.allowed_pools) if policy.allowed_pools else None,
            "access_expires_at": policy.access_expires_at,
        },
        "today": {name: value or 0 for name, value in today.items()},
        "daily": _per_day(history),
    }


@dataclass(frozen=True)
class BudgetLeft:
    """One of a student's token budgets as they see it: what is left and when it resets."""

    period: str  # "today", "this week", "this term"
    budget: int
    used: int
    resets_at: datetime

    @property
    def left(self) -> int:
        return max(0, self.budget - self.used)

    @property
    def used_percent(self) -> int:
        return min(100, round(100 * self.used / self.budget)) if self.budget else 100


def budgets_left(user: User) -> list[BudgetLeft]:
    """The student's day, week and term budgets (those with a cap), from the live counters the
    gateway charges (requests in flight count at their reservation). Empty if live state is
    unreachable: the page still renders."""
    policy = student_policy(user)
    now = timezone.now()
    scope = f"user:{user.id}"
    day, day_left_s = today(now)
    week, week_left_s = this_week(now)
    term = this_term(policy.term, now)
    wanted = [("today", policy.student.tokens_per_day, day, day_left_s),
              ("this week", policy.student.tokens_per_week, week, week_left_s)]
    if term is not None:
        wanted.append(("this term", policy.student.tokens_per_term, term[0], term[1]))
    try:
        return [BudgetLeft(name, cap, quota_live().tokens_used_sync(scope, period), now + timedelta(seconds=left_s))
                for name, cap, period, left_s in wanted if cap is not None]
    except LiveStateUnavailable:
        return []


def near_their_limit(students: list[User]) -> list[tuple[User, list[BudgetLeft], int]]:
    """Each student with a capped budget, their budgets and the largest share used (percent),
    most used first: the class page's "near their limit" list."""
    rows = []
    for person in students:
        budgets = budgets_left(person)
        if budgets:
            rows.append((person, budgets, max(b.used_percent for b in budgets)))
    return sorted(rows, key=lambda row: (-row[2], row[0].username))


def class_daily_usage(classroom: Classroom, *, days: int = 30) -> list[dict[str, Any]]:
    """A class's requests and tokens per day (the sum of its students' roll-ups), oldest first."""
    rows = DailyUsage.objects.filter(classroom=classroom, day__gte=timezone.localdate() - timedelta(days=days))
    return _per_day(rows, students=Count("user", distinct=True))
