"""A hands-on step turns done only on the person's own evidence, and stays done."""
from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from accounts.services import key_issue
from core.live import live_state
from accounts.limits.quota import concurrency_resource
from fleet.services import worker_register
from inference.models import RequestLog
from lessons.models import Answer, AnswerAttempt, FleetSighting, StepDone
from tests.lessons.helpers import AGENT_SHAPE, CLAUDE_AGENT, COPILOT_AGENT, log_request, log_session

pytestmark = pytest.mark.django_db
EDITOR_STEP = "/lessons/editors/steps/first-editor-request/"
TTFT_STEP = "/lessons/measurement/steps/measure-ttft/"


@pytest.fixture
def worker():  # noqa: ANN201
    return worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="smollm2-135m-instruct",
                           pool_name="production", state="healthy")


def _done(user, step: str) -> bool:  # noqa: ANN001
    return StepDone.objects.filter(user=user, step=step).exists()


def test_editor_step_needs_my_own_key_and_an_editor(client, student, other_student, worker) -> None:  # noqa: ANN001
    my_key, _ = key_issue(user=student)
    their_key, _ = key_issue(user=other_student)
    client.force_login(student)
    # A classmate's Copilot request, a request logged under me with their key, my own curl,
    # my Copilot request that failed, and my Copilot discovery call: none of them count.
    log_request(user=other_student, key=their_key, worker=worker, user_agent=COPILOT_AGENT)
    log_request(user=student, key=their_key, worker=worker, user_agent=COPILOT_AGENT)
    log_request(user=student, key=my_key, worker=worker, user_agent="curl/8.5.0")
    log_request(user=student, key=my_key, worker=None, user_agent=COPILOT_AGENT, status=429, ttft_ms=None)
    log_request(user=student, key=my_key, worker=worker, user_agent=COPILOT_AGENT, error_code="upstream_error")
    log_request(user=student, key=my_key, worker=None, client="ollama", path="/ollama/<redacted>/api/tags")
    page = client.post(EDITOR_STEP, follow=True).content.decode()
    assert "Not yet" in page and not _done(student, "first-editor-request")
    log_session(user=student, key=my_key, worker=worker)
    page = client.post(EDITOR_STEP, follow=True).content.decode()
    assert "Done: Claude Code at work: 2 requests of one session" in page and _done(student, "first-editor-request")
    assert "24 tools" in page and 'data-step-status="first-editor-request">done' in page
    assert not _done(other_student, "first-editor-request")


def test_a_faked_user_agent_is_refused(client, student, worker) -> None:  # noqa: ANN001
    """curl -A claude-cli/… with a one-line prompt, sent as often as you like, is not Claude Code."""
    key, _ = key_issue(user=student)
    client.force_login(student)
    for _ in range(3):
        log_request(user=student, key=key, worker=worker, client="anthropic", path="/v1/messages",
                    user_agent=CLAUDE_AGENT, conversation="same", turns=1, tools_n=0, system_chars=0)
    page = client.post(EDITOR_STEP, follow=True).content.decode()
    assert "Not yet" in page and "carried no coding agent" in page and not _done(student, "first-editor-request")
    # The agent's payload on one request only: a second turn of the session is still missing.
    log_request(user=student, key=key, worker=worker, client="ollama", path="/ollama/<redacted>/v1/chat/completions",
                user_agent=COPILOT_AGENT, conversation="other", turns=1, **AGENT_SHAPE)
    page = client.post(EDITOR_STEP, follow=True).content.decode()
    assert "ask a second question in the same chat" in page and not _done(student, "first-editor-request")
    log_request(user=student, key=key, worker=worker, client="ollama", path="/ollama/<redacted>/v1/chat/completions",
                user_agent=COPILOT_AGENT, conversation="other", turns=2, **AGENT_SHAPE)
    page = client.post(EDITOR_STEP, follow=True).content.decode()
    assert "Done: GitHub Copilot at work" in page and _done(student, "first-editor-request")


def test_a_done_step_stays_done_when_the_log_is_pruned(client, student, worker) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    rows = log_session(user=student, key=key, worker=worker, client="ollama",
                       path="/ollama/<redacted>/v1/chat/completions", user_agent="")
    client.force_login(student)
    client.post(EDITOR_STEP)
    assert StepDone.objects.get(user=student, step="first-editor-request").request_log_id == rows[-1].id
    RequestLog.objects.all().delete()
    assert "Verified" in client.get("/lessons/editors/").content.decode()


def test_fleet_watch_counts_only_while_my_own_request_is_in_flight(client, student, other_student) -> None:  # noqa: ANN001
    live = live_state()
    client.force_login(student)
    theirs = async_to_sync(live.claim)(concurrency_resource(f"user:{other_student.id}"), 10, 30)
    try:
        assert client.get("/lessons/fleet.json").json()["mine_in_flight"] == 0
        client.post("/lessons/scheduling/steps/watch-fleet/")
        assert not _done(student, "watch-fleet") and not FleetSighting.objects.exists()
        mine = async_to_sync(live.claim)(concurrency_resource(f"user:{student.id}"), 10, 30)
        try:
            for _ in range(3):  # the panel polls every second; one sighting a minute is kept
                assert client.get("/lessons/fleet.json").json()["mine_in_flight"] == 1
            assert FleetSighting.objects.filter(user=student).count() == 1
        finally:
            async_to_sync(live.release)(concurrency_resource(f"user:{student.id}"), mine or "")
    finally:
        async_to_sync(live.release)(concurrency_resource(f"user:{other_student.id}"), theirs or "")
    page = client.post("/lessons/scheduling/steps/watch-fleet/", follow=True).content.decode()
    assert "Done: the fleet view saw 1 of your requests in flight" in page
    assert _done(student, "watch-fleet") and not _done(other_student, "watch-fleet")


def test_ttft_step_pins_the_quoted_request_and_refuses_a_number_below_it(client, student, other_student,  # noqa: ANN001
                                                                         worker) -> None:
    my_key, _ = key_issue(user=student)
    their_key, _ = key_issue(user=other_student)
    theirs = log_request(user=other_student, key=their_key, worker=worker, ttft_ms=2000, request_id="a" * 32)
    mine = log_request(user=student, key=my_key, worker=worker, ttft_ms=180, request_id="b" * 32)
    log_request(user=student, key=my_key, worker=worker, ttft_ms=2000, request_id="c" * 32)
    client.force_login(student)

    def check(request_id: str, ttft: str) -> str:
        return client.post(TTFT_STEP, {"ttft_ms": ttft, "request_id": request_id}, follow=True).content.decode()

    assert "x-request-id header" in check("", "200")
    assert "None of your served streamed requests" in check(theirs.request_id, "2100")  # a classmate's
    assert "does not fit request" in check(mine.request_id, "150")  # below the gateway's: made up
    assert "does not fit request" in check(mine.request_id, "2100")  # fits another request, not this one
    assert not _done(student, "measure-ttft")
    page = check(mine.request_id.upper(), "245.5")
    assert f"you measured 246 ms for request {mine.request_id}; the gateway logged 180 ms" in page
    done = StepDone.objects.get(user=student, step="measure-ttft")
    assert done.request_log_id == mine.id and done.reported_ttft_ms == 245.5


def test_answers_are_saved_per_student_and_can_be_changed(client, student, other_student) -> None:  # noqa: ANN001
    client.force_login(student)
    page = client.post("/lessons/api/questions/api-503/", {"choice": "1"}, follow=True).content.decode()
    assert 'data-verdict="wrong"' in page
    page = client.post("/lessons/api/questions/api-503/", {"choice": "0"}, follow=True).content.decode()
    assert 'data-verdict="right"' in page and "upstream rate limit hit" in page
    answer = Answer.objects.get(user=student, question="api-503")
    assert answer.correct and answer.attempts == 2 and answer.choice == 0 and answer.first_try_correct is False
    assert list(AnswerAttempt.objects.filter(user=student).values_list("choice", "correct")) == [(1, False), (0, True)]
    assert not Answer.objects.filter(user=other_student).exists()
    client.force_login(other_student)
    assert "data-verdict" not in client.get("/lessons/api/").content.decode()


def test_pages_judge_answers_by_the_catalogue_like_progress_does(client, student) -> None:  # noqa: ANN001
    # A stored verdict from before a teacher corrected the right answer in lessons.toml.
    Answer.objects.create(user=student, question="api-503", choice=2, correct=True)
    client.force_login(student)
    page = client.get("/lessons/api/").content.decode()
    assert 'data-verdict="wrong"' in page and 'data-verdict="right"' not in page
    progress = client.get("/lessons/progress/").content.decode()
    assert "<td>0/3</td>" in progress.split('data-lesson="api"', 1)[1].split("</tr>", 1)[0]


def test_trace_step_shows_my_request_hop_by_hop(client, student, other_student, worker) -> None:  # noqa: ANN001
    my_key, _ = key_issue(user=student)
    their_key, _ = key_issue(user=other_student)
    theirs = log_request(user=other_student, key=their_key, worker=worker, request_id="e" * 32)
    mine = log_request(user=student, key=my_key, worker=worker, request_id="f" * 32, route_reason="0/4 slots busy")
    client.force_login(student)
    step = "/lessons/control-plane/steps/trace-my-request/"
    assert "x-request-id header" in client.post(step, {"request_id": "nope"}, follow=True).content.decode()
    page = client.post(step, {"request_id": theirs.request_id}, follow=True).content.decode()
    assert "None of your served requests" in page and not _done(student, "trace-my-request")
    page = client.post(step, {"request_id": mine.request_id}, follow=True).content.decode()
    assert "worker w1 chosen (0/4 slots busy)" in page and "first byte after 120 ms" in page
    assert _done(student, "trace-my-request")


def test_dialect_step_needs_one_served_call_in_each_chat_dialect(client, student, worker) -> None:  # noqa: ANN001
    key, _ = key_issue(user=student)
    client.force_login(student)
    step = "/lessons/api/steps/every-dialect/"
    log_request(user=student, key=key, worker=worker, client="openai", path="/v1/chat/completions")
    log_request(user=student, key=key, worker=worker, client="anthropic", path="/v1/messages/count_tokens")
    log_request(user=student, key=key, worker=None, client="responses", path="/v1/responses", status=429)
    page = client.post(step, follow=True).content.decode()
    assert "Anthropic Messages (/v1/messages), OpenAI Responses (/v1/responses)" in page
    log_request(user=student, key=key, worker=worker, client="anthropic", path="/v1/messages")
    log_request(user=student, key=key, worker=worker, client="responses", path="/v1/responses")
    page = client.post(step, follow=True).content.decode()
    assert "Done: one request in each dialect" in page and _done(student, "every-dialect")


def test_predict_step_compares_my_prediction_with_the_worker_my_next_request_got(client, student, worker) -> None:  # noqa: ANN001
    other = worker_register(name="w2", base_url="http://127.0.0.1:10", model_id="smollm2-135m-instruct",
                            pool_name="production", state="healthy")
    key, _ = key_issue(user=student)
    client.force_login(student)
    step = "/lessons/rigs-and-workers/steps/predict-worker/"
    assert 'id="predict-predict-worker"' in client.get("/lessons/rigs-and-workers/").content.decode()
    assert "Predict first" in client.post(step, follow=True).content.decode()
    assert "Pick one of the workers" in client.post(step, {"action": "predict", "worker": "nope"},
                                                    follow=True).content.decode()
    log_request(user=student, key=key, worker=other, at=timezone.now() - timedelta(minutes=5))  # before it
    assert "Prediction saved" in client.post(step, {"action": "predict", "worker": "w1"}, follow=True).content.decode()
    assert "Now send one request" in client.post(step, follow=True).content.decode()
    log_request(user=student, key=key, worker=other, route_reason="0/4 slots busy", request_id="a" * 32)
    page = client.post(step, follow=True).content.decode()
    assert "went to w2 (0/4 slots busy)" in page and not _done(student, "predict-worker")
    client.post(step, {"action": "predict", "worker": "w2"})
    log_request(user=student, key=key, worker=other, route_reason="0/4 slots busy", request_id="b" * 32)
    page = client.post(step, follow=True).content.decode()
    assert "Done: you predicted w2" in page and _done(student, "predict-worker")


def test_a_steps_not_yet_is_shown_in_the_step_the_check_returns_to(client, student, worker) -> None:  # noqa: ANN001
    """The Check redirects to #step-…; a reason shown at the top of the page was 4,000 px above
    the view on a phone, and the student saw nothing change."""
    key_issue(user=student)
    client.force_login(student)
    response = client.post(EDITOR_STEP, follow=True)
    assert response.redirect_chain[-1][0].endswith("#step-first-editor-request")
    page = response.content.decode()
    step = page[page.index('id="step-first-editor-request"'):]
    step = step[:step.index('<div class="step')] if '<div class="step' in step else step
    assert 'data-step-note="first-editor-request"' in step and "Not yet: " in step
    assert page.count("Not yet: ") == 1  # not repeated at the top
