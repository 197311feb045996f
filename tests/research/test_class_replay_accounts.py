"""The class replay's accounts and pages, on the database (no server): replay students are
marked and kept out of the teacher's usage and progress, the run's limits go on their class,
keys are fresh each run, the guard sees real students, and the run page draws its charts."""
from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from accounts.models import ApiKey, Classroom, User
from accounts.services import key_issue, user_ensure
from fleet.models import Pool
from inference.models import RequestLog
from lessons.syllabus import load_catalogue
from lessons.models import Answer, StepDone
from lessons.selectors import all_class_progress, finished_count
from portal.selectors import usage_by_person
from research.class_metrics import Turn, Weights, class_report, turn_row
from research.models import BenchmarkRun
from research.replay_services import (REPLAY_CLASS, ReplayRefused, real_students_busy, replay_keys_revoke,
                                      replay_students_ensure)

pytestmark = pytest.mark.django_db
ROSTER = [("replay-agent-01", "agent"), ("replay-chat-01", "chat")]
LIMITS = {"requests_per_minute": 500, "tokens_per_day": 10_000_000, "concurrency": 2}


def test_replay_students_are_marked_in_their_own_class_with_the_runs_limits() -> None:
    issued = replay_students_ensure(roster=ROSTER, limits=LIMITS, pool=Pool.objects.get_default())
    classroom = Classroom.objects.get(name=REPLAY_CLASS)
    assert classroom.is_replay and classroom.requests_per_minute == 500 and classroom.concurrency == 2
    assert [(u.username, u.is_replay, u.classroom_id) for u, _, _ in issued] == [
        ("replay-agent-01", True, classroom.id), ("replay-chat-01", True, classroom.id)]
    first_keys = [key.id for _, key, _ in issued]
    again = replay_students_ensure(roster=ROSTER, limits=LIMITS, pool=Pool.objects.get_default())
    # a second run reuses the students; the keys an interrupted run left are revoked first
    assert User.objects.filter(is_replay=True).count() == 2
    assert not ApiKey.objects.filter(id__in=first_keys, revoked_at__isnull=True).exists()
    assert replay_keys_revoke([key for _, key, _ in again]) == 2
    assert not ApiKey.objects.filter(user__is_replay=True, revoked_at__isnull=True).exists()


def test_a_real_account_or_class_with_a_replay_name_is_never_taken_over() -> None:
    user_ensure(username="replay-agent-01", role="student")
    with pytest.raises(ReplayRefused):
        replay_students_ensure(roster=ROSTER, limits=LIMITS, pool=Pool.objects.get_default())
    User.objects.filter(username="replay-agent-01").delete()
    Classroom.objects.filter(name=REPLAY_CLASS).update(is_replay=False)
    with pytest.raises(ReplayRefused):
        replay_students_ensure(roster=ROSTER, limits=LIMITS, pool=Pool.objects.get_default())


def _finish(user: User) -> None:
    catalogue = load_catalogue()
    for step in catalogue.steps:
        StepDone.objects.create(user=user, step=step.slug, evidence="test evidence")
    for question in catalogue.questions:
        Answer.objects.create(user=user, question=question.id, choice=question.answer, correct=True)


def _log(user: User) -> RequestLog:
    return RequestLog.objects.create(at=timezone.now(), user=user, client="openai", path="/v1/chat/completions",
                                     status=200, prompt_tokens=100, completion_tokens=10)


def test_the_guard_sees_real_students_recent_requests_not_the_replays() -> None:
    issued = replay_students_ensure(roster=ROSTER, limits=LIMITS, pool=Pool.objects.get_default())
    _log(issued[0][0])
    assert real_students_busy() == []
    alice, _ = user_ensure(username="alice", role="student")
    key_issue(user=alice)
    _log(alice)
    reasons = real_students_busy()
    assert len(reasons) == 1 and "alice" in reasons[0]


def test_replay_accounts_are_left_out_of_usage_and_ground_0_progress() -> None:
    issued = replay_students_ensure(roster=ROSTER, limits=LIMITS, pool=Pool.objects.get_default())
    alice, _ = user_ensure(username="alice", role="student")
    for user in (alice, issued[0][0]):
        _log(user)
    assert [p["username"] for p in usage_by_person()] == ["alice"]
    admin, _ = user_ensure(username="admin", role="teacher")
    admin.is_superuser = True
    admin.save(update_fields=["is_superuser"])  # sees every class, the replay's too if it were listed
    assert REPLAY_CLASS not in [group.name for group in all_class_progress(admin)]
    for user in (alice, issued[0][0]):
        _finish(user)
    assert finished_count() == 1  # alice, not the replay student who "finished" too


def _replay_run() -> BenchmarkRun:
    turns = [Turn("replay-agent-01", "agent", 0.0, 5.0, 2.0, True, "", 1000, 0, 40, worker="w1"),
             Turn("replay-agent-01", "agent", 7.0, 9.0, 7.5, True, "", 1200, 1000, 40, worker="w1"),
             Turn("replay-chat-01", "chat", 1.0, 12.0, 6.0, True, "", 50, 0, 20, worker="w1"),
             Turn("replay-chat-01", "chat", 13.0, 14.0, None, False, "queue_timeout")]
    report = class_report(turns, duration_s=15.0, weights=Weights(), roster=ROSTER, workers=["w1"])
    config = {"workers": 1, "slots": 4, "context": 4096, "policy": "tokens", "policy_applied": False,
              "policy_note": "recorded only", "weights": Weights().as_dict(), "mix": {"agent": 1, "chat": 1},
              "students": 2, "duration_s": 15, "scale": 0.1, "seed": 0}
    return BenchmarkRun.objects.create(
        kind=BenchmarkRun.Kind.CLASS_REPLAY, group="g1", scenario="class-replay", label="class replay <2>",
        target="gateway", base_url="http://127.0.0.1:8000", model="smollm2", prompt_tokens=750, output_tokens=33,
        requests=4, status="done", ended_at=timezone.now(), launch=config,
        summary={**report, "config": config, "requests": [turn_row(t) for t in turns]})


def test_the_run_page_plots_ttft_per_persona_and_service_share(client: Client, teacher) -> None:  # noqa: ANN001
    run = _replay_run()
    client.force_login(teacher)
    page = client.get(f"/research/runs/{run.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Time to first token per persona" in html and "Share of the weighted service" in html
    assert html.count("<svg") >= 3 and "queue_timeout:1" in html
    assert "the ideal fair server on the same turns" in html  # jain_ideal, beside the measured index
    assert "class replay &lt;2&gt;" in html  # escaped
    assert client.get("/research/").status_code == 200


def test_students_cannot_see_a_replay_run(client: Client, student) -> None:  # noqa: ANN001
    run = _replay_run()
    client.force_login(student)
    assert client.get(f"/research/runs/{run.pk}/").status_code == 403


def test_the_command_checks_students_against_the_mix() -> None:
    with pytest.raises(CommandError, match="does not equal the sum of --mix"):
        call_command("class_replay", "--base-url", "http://127.0.0.1:9", "--mix", "agent:2,chat:1", "--students", "4")
    with pytest.raises(CommandError, match="expected PERSONA:COUNT"):
        call_command("class_replay", "--base-url", "http://127.0.0.1:9", "--mix", "robot:1")


def test_the_command_refuses_while_real_students_are_busy() -> None:
    alice, _ = user_ensure(username="alice", role="student")
    key_issue(user=alice)
    _log(alice)
    with pytest.raises(CommandError, match="--force"):
        call_command("class_replay", "--base-url", "http://127.0.0.1:9", "--mix", "chat:1", "--duration", "1")
    assert not BenchmarkRun.objects.exists() and not User.objects.filter(is_replay=True).exists()
