"""A teacher's one-off changes to a student's token budgets: an extra allowance for the current
day, week or term, or a reset of what the period has used. Both act on the live counters the
gateway charges (live_quota.py), so they hold on the next request in every gateway process, and
both are audited. An allowance lowers the period's counter (it may go below zero: that is the
extra room); a reset sets it back to zero."""
from __future__ import annotations

from typing import Literal

from asgiref.sync import async_to_sync

from accounts.audit import audit_record
from accounts.models import BudgetGrant, User
from accounts.selectors import student_policy
from accounts.limits.live_quota import quota_live
from core.school_day import this_term, this_week, today

Period = Literal["day", "week", "term"]
PERIODS: tuple[Period, ...] = ("day", "week", "term")


def student_scope(user: User) -> str:
    """The live-state counting scope of a student (all their keys together); see accounts.limits.gate.scopes_for."""
    return f"user:{user.id}"


def current_period(user: User, period: Period) -> str | None:
    """The counter name of the student's current day, week or term (None: their class has no
    term running)."""
    if period == "day":
        return today()[0]
    if period == "week":
        return this_week()[0]
    term = this_term(student_policy(user).term)
    return term[0] if term else None


def _shift(user: User, period: Period, delta: int) -> None:
    name = current_period(user, period)
    if name is None:
        raise ValueError("Their class has no term running: set the term's dates on the class page.")
    async_to_sync(quota_live().settle)([student_scope(user)], name, delta)  # that one counter only


def budget_grant(*, student: User, period: Period, tokens: int, actor: User | None = None) -> None:
    """A one-off extra allowance of `tokens` for the student's current `period`."""
    if tokens <= 0:
        raise ValueError("The extra allowance must be a positive number of tokens.")
    _shift(student, period, -tokens)
    BudgetGrant.objects.create(student=student, period=period, counter=current_period(student, period) or "",
                               tokens=tokens, actor=actor)
    audit_record(actor=actor, action="budget.granted", subject=student.username,
                 detail=f"{tokens} extra tokens this {period}")


def budget_reset(*, student: User, period: Period, actor: User | None = None) -> int:
    """Set what the student's current `period` has used back to zero. Returns the tokens it had used."""
    name = current_period(student, period)
    if name is None:
        raise ValueError("Their class has no term running: set the term's dates on the class page.")
    used = quota_live().tokens_used_sync(student_scope(student), name)
    if used:
        _shift(student, period, -used)
    BudgetGrant.objects.filter(student=student, counter=name).delete()  # the counter is at zero: no extra left
    audit_record(actor=actor, action="budget.reset", subject=student.username,
                 detail=f"this {period}: {used} tokens used set back to 0")
    return used


def extra_granted(users: list[User]) -> dict[int, dict[Period, int]]:
    """The extra tokens granted to each student for each of their current periods (one query)."""
    counters = {user.id: {period: current_period(user, period) for period in PERIODS} for user in users}
    extra: dict[int, dict[Period, int]] = {user.id: dict.fromkeys(PERIODS, 0) for user in users}
    wanted = {name for periods in counters.values() for name in periods.values() if name}
    rows = BudgetGrant.objects.filter(student__in=[user.id for user in users], counter__in=wanted)
    for student_id, period, counter, tokens in rows.values_list("student_id", "period", "counter", "tokens"):
        if period in PERIODS and counters[student_id].get(period) == counter:
            extra[student_id][period] += tokens
    return extra
