"""Reads for the portal's and the teacher's pages. Every list is bounded and select_related."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.utils import timezone

from accounts.key_cache import class_pause_rule
from accounts.limits.budgets import Period, extra_granted
from accounts.models import ApiKey, Classroom, User
from accounts.pause import ActivePause, upcoming_pause
from accounts.selectors import PauseStatus, pause_status
from core.school_day import day_bounds
from fleet.models import CatalogModel, Worker
from fleet.selectors import usable_context as fleet_usable_context
from inference.models import DailyUsage, RequestLog
from inference.selectors import BudgetLeft, budgets_left
from lessons.models import Answer, StepDone
from portal.connect import ConnectModel
from portal.stats import DayStats, daily_stats

USAGE_DAYS = 14
RECENT_REQUESTS = 25


def active_keys(user: User) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(user=user, revoked_at__isnull=True, chat_session="").select_related("pool")


def keys_of(user: User) -> QuerySet[ApiKey]:
    """All of a person's own keys, newest first (revoked ones too, marked); the chat page's
    session keys are not listed (nobody copies or revokes them by hand)."""
    return ApiKey.objects.filter(user=user, chat_session="").select_related("pool").order_by("-created_at")


def usable_context(model: CatalogModel) -> int:
    """Tokens one request to `model` may hold (prompt and answer together): what clients should be
    told (fleet.selectors.usable_context). `model` comes annotated with `largest_slot`."""
    return fleet_usable_context(model.context_length, [getattr(model, "largest_slot", None)])


def served_models(allowed: frozenset[str] | None = None) -> list[ConnectModel]:
    """Models that at least one worker not disabled serves, by id; `allowed` narrows them
    (a student's allowed_models)."""
    serving = [s for s in Worker.State.values if s != Worker.State.DISABLED]
    models = CatalogModel.objects.filter(workers__state__in=serving).annotate(
        largest_slot=Max("workers__context_per_slot", filter=Q(workers__state__in=serving))).order_by("public_id")
    return [
        ConnectModel(id=m.public_id, usable_context=usable_context(m),
                     max_output_tokens=min(m.max_output_tokens, max(1, usable_context(m) // 2)),
                     tools=m.supports_tools, description=m.description)
        for m in models
        if not allowed or m.public_id in allowed
    ]


def usage_days(user: User | None = None, *, users: QuerySet[User] | None = None,
               days: int = USAGE_DAYS) -> list[DayStats]:
    """Requests, tokens, median time to first token and tokens/s per school day for the last
    `days` days, from the request log (one query)."""
    start, _ = day_bounds(timezone.localdate() - timedelta(days=days - 1))
    rows = RequestLog.objects.filter(at__gte=start)
    if user is not None:
        rows = rows.filter(user=user)
    if users is not None:
        rows = rows.filter(user__in=users)
    values = rows.values_list("at", "prompt_tokens", "completion_tokens", "ttft_ms", "tokens_per_s", "status")
    return daily_stats((timezone.localtime(at).date(), p, c, t, r, s) for at, p, c, t, r, s in values.iterator())


def recent_requests(user: User, limit: int = RECENT_REQUESTS) -> QuerySet[RequestLog]:
    return RequestLog.objects.filter(user=user).order_by("-at")[:limit]


def today_totals(user_ids: list[int]) -> dict[int, dict[str, int]]:
    """Today's requests and tokens per person, for the given ids (one query)."""
    start, _ = day_bounds(timezone.localdate())
    rows = (RequestLog.objects.filter(at__gte=start, user_id__in=user_ids).values("user_id")
            .annotate(requests=Count("id"), tokens=Sum("prompt_tokens") + Sum("completion_tokens")))
    return {row["user_id"]: {"requests": row["requests"], "tokens": row["tokens"] or 0} for row in rows}


def classes_overview(rooms: QuerySet[Classroom] | None = None) -> QuerySet[Classroom]:
    return (Classroom.objects.all() if rooms is None else rooms).annotate(
        student_count=Count("students", filter=Q(students__role=User.Role.STUDENT), distinct=True),
        active_count=Count("students", filter=Q(students__is_active=True, students__role=User.Role.STUDENT),
                           distinct=True),
    ).order_by("name")


def students_of(classroom: Classroom | None) -> QuerySet[User]:
    """A class's students (or those in no class), with their active key counts."""
    people = User.objects.filter(role=User.Role.STUDENT, classroom=classroom)
    return people.annotate(active_keys=Count("api_keys", filter=Q(api_keys__revoked_at__isnull=True,
                                                                  api_keys__chat_session=""))).order_by(
        "username")


def usage_by_person(*, days: int = 30, users: QuerySet[User] | None = None) -> list[dict[str, Any]]:
    """Requests and tokens per student over the last `days` days from the daily roll-ups,
    plus today from the request log; most tokens first. `users`: only these people. Replay accounts (`class_replay`'s load) are left out."""
    since = timezone.localdate() - timedelta(days=days)
    rolled_rows = DailyUsage.objects.filter(day__gte=since, day__lt=timezone.localdate(), user__is_replay=False)
    today_rows = RequestLog.objects.filter(user__isnull=False, user__is_replay=False)
    if users is not None:
        rolled_rows, today_rows = rolled_rows.filter(user__in=users), today_rows.filter(user__in=users)
    rolled = (rolled_rows
              .values("user_id", "user__username", "user__classroom__name")
              .annotate(requests=Sum("requests"), prompt_tokens=Sum("prompt_tokens"),
                        completion_tokens=Sum("completion_tokens")))
    start, _ = day_bounds(timezone.localdate())
    today = (today_rows.filter(at__gte=start)
             .values("user_id", "user__username", "user__classroom__name")
             .annotate(requests=Count("id"), prompt_tokens=Sum("prompt_tokens"),
                       completion_tokens=Sum("completion_tokens")))
    people: dict[int, dict[str, Any]] = {}
    for row in [*rolled, *today]:
        person = people.setdefault(row["user_id"], {
            "user_id": row["user_id"], "username": row["user__username"],
            "classroom": row["user__classroom__name"] or "", "requests": 0, "prompt_tokens": 0,
            "completion_tokens": 0})
        for name in ("requests", "prompt_tokens", "completion_tokens"):
            person[name] += row[name] or 0
    return sorted(people.values(), key=lambda p: (-(p["prompt_tokens"] + p["completion_tokens"]), p["username"]))


def usage_per_day(*, days: int = 30, users: QuerySet[User] | None = None) -> list[dict[str, Any]]:
    """Requests and tokens per student and school day over the last `days` days (the roll-ups,
    and today from the request log), oldest day first."""
    local_today = timezone.localdate()
    rolled_rows = DailyUsage.objects.filter(day__gte=local_today - timedelta(days=days), day__lt=local_today)
    start, _ = day_bounds(local_today)
    today_rows = RequestLog.objects.filter(at__gte=start, user__isnull=False)
    if users is not None:
        rolled_rows, today_rows = rolled_rows.filter(user__in=users), today_rows.filter(user__in=users)
    fields = ("user__username", "user__classroom__name")
    totals = {"requests": Sum("requests"), "prompt_tokens": Sum("prompt_tokens"),
              "completion_tokens": Sum("completion_tokens")}
    rows = [{**row, "day": row["day"]} for row in rolled_rows.values("day", *fields).annotate(**totals)]
    rows += [{**row, "day": local_today} for row in today_rows.values(*fields).annotate(
        requests=Count("id"), prompt_tokens=Sum("prompt_tokens"), completion_tokens=Sum("completion_tokens"))]
    return sorted(({"day": row["day"], "username": row["user__username"], "classroom": row["user__classroom__name"] or "",
                    "requests": row["requests"] or 0, "prompt_tokens": row["prompt_tokens"] or 0,
                    "completion_tokens": row["completion_tokens"] or 0} for row in rows),
                  key=lambda row: (row["day"], row["username"]))


def usage_by_class(people: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """usage_by_person summed per class (the class a student is in now)."""
    classes: dict[str, dict[str, Any]] = {}
    for person in people:
        row = classes.setdefault(person["classroom"], {"classroom": person["classroom"], "students": 0,
                                                       "requests": 0, "prompt_tokens": 0, "completion_tokens": 0})
        row["students"] += 1
        for name in ("requests", "prompt_tokens", "completion_tokens"):
            row[name] += person[name]
    return sorted(classes.values(), key=lambda c: c["classroom"])


# --- the teacher's landing page: how is each class doing right now? ---------------------------

NEAR_LIMIT_PERCENT = 80
NEXT_PAUSE_WITHIN = timedelta(days=7)


@dataclass(frozen=True)
class ClassToday:
    room: Classroom
    students: int
    requests: int
    tokens: int
    active: int  # students with at least one request today
    requests_yesterday: int
    tokens_yesterday: int
    active_yesterday: int
    pause: PauseStatus
    next_pause: ActivePause | None  # the next one within a week, when none holds now


def _per_class_day(room_ids: list[int], day: date) -> dict[int, dict[str, int]]:
    start, end = day_bounds(day)
    rows = (RequestLog.objects.filter(at__gte=start, at__lt=end, user__classroom_id__in=room_ids)
            .values("user__classroom_id")
            .annotate(requests=Count("id"), prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"),
                      active=Count("user_id", distinct=True)))
    return {row["user__classroom_id"]: {"requests": row["requests"], "active": row["active"],
                                        "tokens": (row["prompt"] or 0) + (row["completion"] or 0)} for row in rows}


def classes_today(rooms: QuerySet[Classroom]) -> list[ClassToday]:
    """Each class's requests, tokens and active students today and yesterday (school days, from
    the request log: two queries), with its pause now and its next timetabled one."""
    listed = list(rooms.filter(is_replay=False).select_related("paused_by").prefetch_related("pause_windows").annotate(
        student_count=Count("students", filter=Q(students__role=User.Role.STUDENT), distinct=True)).order_by("name"))
    ids = [room.id for room in listed]
    local = timezone.localtime()
    today = _per_class_day(ids, local.date())
    yesterday = _per_class_day(ids, local.date() - timedelta(days=1))
    empty = {"requests": 0, "tokens": 0, "active": 0}
    result = []
    for room in listed:
        now, before = today.get(room.id, empty), yesterday.get(room.id, empty)
        pause = pause_status(room)
        coming = None if pause.now else upcoming_pause(class_pause_rule(room), local, within=NEXT_PAUSE_WITHIN)
        result.append(ClassToday(
            room=room, students=getattr(room, "student_count", 0), requests=now["requests"], tokens=now["tokens"],
            active=now["active"], requests_yesterday=before["requests"], tokens_yesterday=before["tokens"],
            active_yesterday=before["active"], pause=pause, next_pause=coming))
    return result


def students_near_limit(rooms: QuerySet[Classroom]) -> list[tuple[User, list[BudgetShown], int]]:
    """Students of these classes who have used NEAR_LIMIT_PERCENT or more of a token budget
    (over it too), most used first."""
    people = list(User.objects.filter(classroom__in=rooms, role=User.Role.STUDENT, is_active=True, is_replay=False)
                  .select_related("classroom"))
    return [row for row in near_limit(people) if row[2] >= NEAR_LIMIT_PERCENT]


def workers_in_one_line() -> str:
    """"3 workers: 2 healthy, 1 draining" (or "No workers yet")."""
    counts = dict(Worker.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    total = sum(counts.values())
    if not total:
        return "No workers yet: nothing can answer until a rig's workers register."
    parts = [f"{counts[state]} {label.lower()}" for state, label in Worker.State.choices if counts.get(state)]
    return f"{total} worker{'s' if total != 1 else ''}: {', '.join(parts)}"


# --- token budgets as people read them ----------------------------------------------------------

PERIOD_OF: dict[str, Period] = {"today": "day", "this week": "week", "this term": "term"}


@dataclass(frozen=True)
class BudgetShown(BudgetLeft):
    """A budget with its extra allowance shown as extra, not as usage going down: after 10,530
    used of 6,000 and 5,000 extra given, "10,530 of 11,000 used (5,000 extra)". `budget` is the
    cap plus the extra."""

    extra: int = 0


def budgets_shown(users: list[User]) -> dict[int, list[BudgetShown]]:
    """Each student's budgets (those with a cap) with their extra allowances: the live counters
    (budgets_left) and one query for the allowances."""
    extras = extra_granted(users)
    shown: dict[int, list[BudgetShown]] = {}
    for user in users:
        rows = []
        for b in budgets_left(user):
            extra = extras[user.id].get(PERIOD_OF.get(b.period, "day"), 0)
            rows.append(BudgetShown(period=b.period, budget=b.budget + extra, used=b.used + extra,
                                    resets_at=b.resets_at, extra=extra))
        shown[user.id] = rows
    return shown


def near_limit(users: list[User]) -> list[tuple[User, list[BudgetShown], int]]:
    """Each student with a capped budget, their budgets and the largest share used (percent),
    most used first."""
    shown = budgets_shown(users)
    rows = [(user, shown[user.id], max(b.used_percent for b in shown[user.id])) for user in users if shown[user.id]]
    return sorted(rows, key=lambda row: (-row[2], row[0].username))


# --- the student's next steps on the home page ---------------------------------------------------


@dataclass(frozen=True)
class NextSteps:
    """Which of the home page's four first steps the person has done, from their own records."""

    key: bool  # has a key that works
    editor: bool  # an editor, agent or script (not the browser's "Test my key") sent a request with their key
    answered: bool  # a request of theirs was answered (the connect page's "Test my key" is one)
    lessons: bool  # a lesson step done or a lesson question answered

    @property
    def all_done(self) -> bool:
        return self.key and self.editor and self.answered and self.lessons


def next_steps(person: User) -> NextSteps:
    mine = RequestLog.objects.filter(user=person)
    return NextSteps(
        key=active_keys(person).exists(),
        editor=mine.exclude(tool="", user_agent__startswith="Mozilla/").exists(),  # not the browser's test
        answered=mine.filter(status=200).exists(),
        lessons=StepDone.objects.filter(user=person).exists() or Answer.objects.filter(user=person).exists(),
    )


CHAT_SHARE_DAYS = 30


@dataclass(frozen=True)
class ChatShare:
    """How much of a class's usage came from the chat page (RequestLog.tool == "chat")."""
    chat_requests: int
    requests: int
    chat_tokens: int
    tokens: int

    @property
    def percent(self) -> int:
        """The chat page's share of the tokens, in whole percent."""
        return round(100 * self.chat_tokens / self.tokens) if self.tokens else 0


def chat_share(classroom: Classroom, *, days: int = CHAT_SHARE_DAYS) -> ChatShare:
    """The chat page's requests and tokens against all of the class's, over the last `days` days
    (today included), from the request log (one query)."""
    start, _ = day_bounds(timezone.localdate() - timedelta(days=days - 1))
    totals = RequestLog.objects.filter(at__gte=start, user__classroom=classroom).aggregate(
        requests=Count("id"), tokens=Sum(F("prompt_tokens") + F("completion_tokens")),
        chat_requests=Count("id", filter=Q(tool="chat")),
        chat_tokens=Sum(F("prompt_tokens") + F("completion_tokens"), filter=Q(tool="chat")))
    return ChatShare(chat_requests=totals["chat_requests"] or 0, requests=totals["requests"] or 0,
                     chat_tokens=totals["chat_tokens"] or 0, tokens=totals["tokens"] or 0)
