"""Token budgets per week and per term (issue 21, item 2): set on a class, overridable per
student, refused with 429 budget_exhausted saying when they reset; students see what is left."""
from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from accounts.key_cache import key_authenticate
from accounts.limits.resolution import Caps, LimitLevel, resolve
from accounts.models import AuditEvent, Classroom, User
from accounts.services import key_issue, limits_set
from core import errors
from core.live import live_state
from accounts.limits.quota import QuotaScope, QuotaVerdict
from inference.protocols import anthropic
from accounts.limits.gate import admit, refusal


def test_a_class_budget_is_each_students_default_and_a_student_overrides_it() -> None:
    room = LimitLevel(tokens_per_week=50_000, tokens_per_term=400_000)
    inherited = resolve(defaults=Caps(tokens_per_day=10_000), classroom=room, student=LimitLevel(),
                        key=LimitLevel())
    assert (inherited.student.tokens_per_week, inherited.student.tokens_per_term) == (50_000, 400_000)
    own = resolve(defaults=Caps(), classroom=room, student=LimitLevel(tokens_per_week=90_000), key=LimitLevel())
    assert (own.student.tokens_per_week, own.student.tokens_per_term) == (90_000, 400_000)


def test_a_spent_weekly_budget_is_budget_exhausted_and_says_when_it_resets() -> None:
    scope = QuotaScope("user:1", None, None, None, tokens_per_week=1000)
    verdict = QuotaVerdict(False, 0, "tokens_per_week", requests_used=0, tokens_used=990, window_reset_ms=0)
    error = refusal(scope, verdict, reserve=50, day_left_s=3600, week_left_s=2 * 86400 + 5)
    assert (error.status, error.code, error.type, error.headers["retry-after"]) == (429, "budget_exhausted", "tokens",
                                                                                    "172805")
    assert "this week" in error.message and "10 of your 1000" in error.message and "resets on" in error.message
    claude = json.loads(anthropic.error_body(error))
    assert claude["error"]["type"] == "rate_limit_error" and claude["error"]["message"].startswith("budget_exhausted: ")
    term = refusal(QuotaScope("user:1", None, None, None, tokens_per_term=5), QuotaVerdict(
        False, 0, "tokens_per_term", 0, 5, 0), reserve=1, day_left_s=10, term_left_s=99)
    assert term.code == "budget_exhausted" and "term ends on" in term.message and term.headers["retry-after"] == "99"


@pytest.mark.django_db(transaction=True)
def test_a_weekly_budget_runs_out_across_requests_and_settles_to_what_was_served(student) -> None:  # noqa: ANN001
    room = Classroom.objects.create(name="7W", tokens_per_week=100)
    User.objects.filter(id=student.id).update(classroom=room)
    _key, raw = key_issue(user=student)
    identity = async_to_sync(key_authenticate)(raw)
    assert identity is not None and identity.policy.student.tokens_per_week == 100

    async def scenario() -> errors.ApiError:
        first = await admit(identity, reserve=60)
        await live_state().finish(first.settlement(10))  # served 10 of the 60 reserved: the week's counter settles too
        second = await admit(identity, reserve=60)
        await live_state().finish(second.settlement(60))
        with pytest.raises(errors.ApiError) as caught:
            await admit(identity, reserve=60)  # 70 used, 60 more would pass 100
        return caught.value

    error = async_to_sync(scenario)()
    assert error.code == "budget_exhausted" and "30 of your 100" in error.message


@pytest.mark.django_db(transaction=True)
def test_a_term_budget_counts_only_inside_the_classs_term(student, teacher) -> None:  # noqa: ANN001
    today = timezone.localdate()
    room = Classroom.objects.create(name="7T", tokens_per_term=50)
    User.objects.filter(id=student.id).update(classroom=room)
    room.teachers.add(teacher)
    page = Client()
    page.force_login(teacher)
    past = {"term_starts": str(today - timedelta(days=60)), "term_ends": str(today - timedelta(days=1))}
    assert page.post(f"/teacher/classes/{room.id}/term/", past).status_code == 302
    _key, raw = key_issue(user=student)
    identity = async_to_sync(key_authenticate)(raw)
    assert identity is not None
    async_to_sync(admit)(identity, reserve=60)  # the term is over: no term budget applies
    page.post(f"/teacher/classes/{room.id}/term/", {"term_starts": str(today), "term_ends": str(today + timedelta(days=90))})
    identity = async_to_sync(key_authenticate)(raw)
    assert identity is not None and identity.policy.term == (today, today + timedelta(days=90))
    with pytest.raises(errors.ApiError) as caught:
        async_to_sync(admit)(identity, reserve=60)
    assert caught.value.code == "budget_exhausted"
    assert AuditEvent.objects.filter(action="class.term", subject="class 7T").count() == 2
    bad = page.post(f"/teacher/classes/{room.id}/term/", {"term_starts": str(today)}, follow=True)
    assert "Give both term dates" in bad.content.decode()


@pytest.mark.django_db(transaction=True)
def test_students_see_what_is_left_and_the_class_page_lists_who_is_near_their_limit(
        student, other_student, teacher, taught_class) -> None:  # noqa: ANN001
    limits_set(target=taught_class, actor=teacher, tokens_per_week=1000)
    limits_set(target=User.objects.get(id=other_student.id), actor=teacher, tokens_per_week=200)
    for person, reserve in ((student, 100), (other_student, 150)):
        _key, raw = key_issue(user=person)
        identity = async_to_sync(key_authenticate)(raw)
        assert identity is not None
        async_to_sync(admit)(identity, reserve=reserve)
    home = Client()
    home.force_login(student)
    html = home.get("/").content.decode()
    assert 'id="budgets"' in html and "900" in html and "of 1,000 tokens left this week" in html.replace("\u202f", ",")
    page = Client()
    page.force_login(teacher)
    near = page.get(f"/teacher/classes/{taught_class.id}/").content.decode()
    section = near[near.index('id="near-limit"'):]
    assert section.index("bob") < section.index("alice")  # 75 % used before 10 %
    assert "75%" in section


@pytest.mark.django_db
def test_set_limits_sets_weekly_and_term_budgets(student) -> None:  # noqa: ANN001
    call_command("set_limits", "alice", "--tokens-per-week", "5000", "--tokens-per-term", "60000", stdout=io.StringIO())
    student.refresh_from_db()
    assert (student.tokens_per_week, student.tokens_per_term) == (5000, 60000)


def test_without_a_fallback_model_or_for_another_refusal_the_refusal_stands(settings) -> None:  # noqa: ANN001
    from inference.catalogue import budget_fallback

    spent = errors.ApiError(429, "spent", type="tokens", code="budget_exhausted")
    too_fast = errors.ApiError(429, "slow down", type="requests", code="rate_limit_exceeded")
    settings.OCS = {**settings.OCS, "BUDGET_FALLBACK_MODEL": ""}
    with pytest.raises(errors.ApiError) as caught:
        async_to_sync(budget_fallback)(spent, None, "big")  # type: ignore[arg-type]
    assert caught.value is spent
    settings.OCS = {**settings.OCS, "BUDGET_FALLBACK_MODEL": "small"}
    for refused, model in ((too_fast, "big"), (spent, "small")):  # not a budget; already the fallback
        with pytest.raises(errors.ApiError) as caught:
            async_to_sync(budget_fallback)(refused, None, model)  # type: ignore[arg-type]
        assert caught.value is refused


@pytest.mark.django_db(transaction=True)
def test_a_teacher_gives_a_one_off_allowance_and_resets_a_week_audited(student, teacher, taught_class) -> None:  # noqa: ANN001
    limits_set(target=taught_class, actor=teacher, tokens_per_week=100)
    _key, raw = key_issue(user=student)
    identity = async_to_sync(key_authenticate)(raw)
    assert identity is not None
    async_to_sync(admit)(identity, reserve=90)
    with pytest.raises(errors.ApiError):
        async_to_sync(admit)(identity, reserve=50)
    page = Client()
    page.force_login(teacher)
    assert page.post(f"/teacher/students/{student.id}/budget/grant/", {"period": "week", "tokens": "50"}).status_code == 302
    async_to_sync(admit)(identity, reserve=50)  # 140 used of 100 + 50
    with pytest.raises(errors.ApiError):
        async_to_sync(admit)(identity, reserve=20)
    page.post(f"/teacher/students/{student.id}/budget/reset/", {"period": "week"})
    async_to_sync(admit)(identity, reserve=100)  # the week starts over: all 100 (the grant is used up too)
    assert list(AuditEvent.objects.filter(subject="alice", action__startswith="budget.").order_by("id")
                .values_list("action", flat=True)) == ["budget.granted", "budget.reset"]
    assert "100 of 100 used (100%)" in page.get(f"/teacher/students/{student.id}/").content.decode()
    refused = page.post(f"/teacher/students/{student.id}/budget/reset/", {"period": "term"}, follow=True)
    assert "no term running" in refused.content.decode()
