"""The chat page (issue 51): its key in an HttpOnly cookie, bound to the sign-in session, used
only from this site's own page, through the gateway's own pipeline; the class's switch and its
share of the usage. The page in a real browser: tests/browser/test_chat.py."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from accounts.models import ApiKey, AuditEvent, Classroom, User
from accounts.services import active_key_count, class_pause, user_set_active
from fleet.models import CatalogModel
from fleet.services import worker_register
from inference.chat_page import CHAT_COOKIE, CHAT_HEADER, CHAT_ROUTE
from inference.models import RequestLog
from tests.api_client import ApiClient, ApiResponse
from tests.portal.conftest import signed_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("request_log_written")]

BODY = {"model": "no-such-model", "max_tokens": 4, "messages": [{"role": "user", "content": "secret homework"}]}


def chat_page(user: User) -> tuple[Client, str]:
    client = signed_in(user)
    response = client.get("/chat/")
    assert response.status_code == 200
    return client, client.cookies[CHAT_COOKIE].value


def from_page(raw: str, **headers: str) -> dict[str, dict[str, str]]:
    """The headers the page's fetch carries (the browser adds Origin, Sec-Fetch-Site, the cookie)."""
    sent = {"Host": "testserver", "Origin": "http://testserver", CHAT_HEADER: "1", "Sec-Fetch-Site": "same-origin",
            "Cookie": f"other=1; {CHAT_COOKIE}={raw}"}
    sent.update(headers)
    return {"headers": {k: v for k, v in sent.items() if v}}


def ask(raw: str, **headers: str) -> ApiResponse:
    return ApiClient().post(CHAT_ROUTE, BODY, **from_page(raw, **headers))


def code(response: ApiResponse) -> str:
    return response.json()["error"]["code"]


def test_the_page_keeps_its_key_in_an_httponly_strict_cookie_for_the_chat_route_only(student: User) -> None:
    client, raw = chat_page(student)
    cookie = client.cookies[CHAT_COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/chat/"
    page = client.get("/chat/")
    assert raw not in page.content.decode() and CHAT_COOKIE not in page.cookies  # the same key, never in the page
    assert "stay in this browser only" in page.content.decode()
    assert page["Cache-Control"] == "no-store"
    # The student's own keys: the chat page's is neither listed nor counted.
    assert active_key_count(student) == 0 and "chat page" not in client.get("/keys/").content.decode()
    assert ApiKey.objects.get(user=student).chat_session != ""


def test_people_who_are_not_signed_in_get_the_sign_in_page() -> None:
    assert Client().get("/chat/")["Location"].startswith("/accounts/login/")
    assert Client().post("/chat/key/").status_code == 302


def test_a_message_goes_through_the_pipeline_as_the_student_and_is_logged_as_from_the_chat_page(
        student: User, request_log_written: None) -> None:
    _, raw = chat_page(student)
    answer = ask(raw)
    assert answer.status_code == 404 and code(answer) == "model_not_found"  # the key was taken: next, the model
    from inference import request_log

    request_log._writer.flush()
    row = RequestLog.objects.get(user=student)
    assert (row.tool, row.path, row.client) == ("chat", CHAT_ROUTE, "openai")
    assert "secret homework" not in json.dumps(list(RequestLog.objects.values()), default=str)


def test_another_origin_cannot_use_the_pages_key(student: User) -> None:
    _, raw = chat_page(student)
    assert code(ask(raw, **{CHAT_HEADER: ""})) == "chat_origin_refused"  # a plain form or no-cors fetch
    assert code(ask(raw, Origin="https://evil.example")) == "chat_origin_refused"
    assert code(ask(raw, Origin="")) == "chat_origin_refused"
    assert code(ask(raw, Origin="null")) == "chat_origin_refused"
    assert code(ask(raw, **{"Sec-Fetch-Site": "cross-site"})) == "chat_origin_refused"
    assert ask(raw, Origin="https://evil.example").status_code == 403
    # A key sent by hand is not the page's: the route reads the cookie only.
    by_hand = ApiClient().post(CHAT_ROUTE, BODY, headers={
        "Host": "testserver", "Origin": "http://testserver", CHAT_HEADER: "1", "Authorization": f"Bearer {raw}"})
    assert by_hand.status_code == 401


def test_signing_out_revokes_the_key_at_once(student: User) -> None:
    client, raw = chat_page(student)
    client.post("/accounts/logout/")
    assert ask(raw).status_code == 401


def test_a_new_key_for_the_session_revokes_the_one_before(student: User) -> None:
    client, raw = chat_page(student)
    client.get("/chat/")  # a CSRF token for the POST
    renewed = Client(enforce_csrf_checks=True)
    renewed.cookies = client.cookies
    token = client.cookies["csrftoken"].value
    assert renewed.post("/chat/key/").status_code == 403  # CSRF like any form
    assert renewed.post("/chat/key/", HTTP_X_CSRFTOKEN=token).status_code == 200
    fresh = renewed.cookies[CHAT_COOKIE].value
    assert fresh != raw and ask(raw).status_code == 401 and ask(fresh).status_code == 404


def test_a_disabled_students_open_page_is_refused_on_the_next_message(student: User) -> None:
    _, raw = chat_page(student)
    user_set_active(user=student, active=False)
    answer = ask(raw)
    assert answer.status_code == 403 and code(answer) == "account_disabled"


def test_a_paused_class_is_refused_with_the_teachers_note_and_the_page_shows_it(
        taught_class: Classroom, teacher: User, student: User) -> None:
    client, raw = chat_page(student)
    class_pause(classroom=taught_class, actor=teacher, message="Maths exam until the bell")
    answer = ask(raw)
    assert answer.status_code == 403 and code(answer) == "class_paused"
    assert "Maths exam until the bell" in answer.json()["error"]["message"]
    assert "Maths exam until the bell" in client.get("/chat/").content.decode()


def test_the_teacher_turns_the_chat_page_off_and_open_pages_stop(
        taught_class: Classroom, teacher: User, student: User, second_teacher: User) -> None:
    client, raw = chat_page(student)
    assert signed_in(second_teacher).post(f"/teacher/classes/{taught_class.id}/chat/", {"on": "0"}).status_code == 404
    assert ask(raw).status_code == 404  # still on
    signed_in(teacher).post(f"/teacher/classes/{taught_class.id}/chat/", {"on": "0"})
    assert ask(raw).status_code == 401
    page = client.get("/chat/").content.decode()
    assert "The chat page is off for your class" in page and CHAT_COOKIE not in client.get("/chat/").cookies
    assert client.post("/chat/key/").status_code == 403
    assert AuditEvent.objects.filter(action="class.chat", detail="chat page off").exists()
    signed_in(teacher).post(f"/teacher/classes/{taught_class.id}/chat/", {"on": "1"})
    assert ask(chat_page(student)[1]).status_code == 404


def test_teachers_chat_too(teacher: User) -> None:
    _, raw = chat_page(teacher)
    assert ask(raw).status_code == 404


def test_the_class_page_shows_the_chat_pages_share_of_the_usage(
        taught_class: Classroom, teacher: User, student: User) -> None:
    from django.utils import timezone

    common = {"at": timezone.now(), "user": student, "client": "openai", "path": "/v1/chat/completions", "status": 200}
    RequestLog.objects.create(**common, tool="chat", prompt_tokens=200, completion_tokens=50)
    RequestLog.objects.create(**common, tool="copilot", prompt_tokens=700, completion_tokens=50)
    page = signed_in(teacher).get(f"/teacher/classes/{taught_class.id}/").content.decode()
    assert "<strong>25%</strong> of this class's tokens" in page and "1 of 2 requests" in page


def test_the_picker_shows_each_models_line_context_and_the_fallback(student: User, settings) -> None:  # noqa: ANN001
    worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="tiny-chat", pool_name="production",
                    slots=1, context_length=4096, state="healthy")
    CatalogModel.objects.filter(public_id="tiny-chat").update(description="Small and quick: good for first questions")
    settings.OCS = {**settings.OCS, "BUDGET_FALLBACK_MODEL": "tiny-chat"}
    page = signed_in(student).get("/chat/").content.decode()
    assert 'data-description="Small and quick: good for first questions"' in page
    assert 'data-fallback="yes"' in page and 'data-context="4096"' in page
