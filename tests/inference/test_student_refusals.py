"""Refusals a student can read (issue 21, item 4): a disabled account, a paused class, a spent
budget and a context overflow each say what happened, in every dialect's envelope."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from tests.api_client import ApiClient
from django.utils import timezone

from accounts.services import key_issue, user_set_active
from core import errors
from inference.protocols import anthropic, ollama, openai_chat


def test_a_context_overflow_says_both_numbers_and_what_the_student_can_do() -> None:
    body = json.dumps({"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 9000,
                                 "n_ctx": 4096, "message": "request (9000 tokens) exceeds the available context "
                                 "size (4096 tokens), try increasing it"}}).encode()
    error = errors.from_llama_server(400, body)
    assert (error.status, error.code, error.param) == (400, "context_length_exceeded", "messages")
    assert "9000" in error.message and "4096" in error.message
    assert "try increasing it" not in error.message  # a student cannot change the worker's context
    for advice in ("shorter conversation", "another model", "agents profile"):
        assert advice.split()[-1] in error.message


def test_a_context_overflow_without_structured_numbers_reads_them_from_the_message() -> None:
    body = json.dumps({"error": {"type": "exceed_context_size_error",
                                 "message": "request (5123 tokens) exceeds the available context size (2048 tokens)"}})
    error = errors.from_llama_server(400, body.encode())
    assert "5123 tokens long" in error.message and "holds 2048 tokens" in error.message


def test_each_dialect_carries_the_code_where_its_clients_look() -> None:
    error = errors.class_paused("Your class is paused by Ms. T until 14:30.")
    openai_body = json.loads(openai_chat.error_body(error))
    assert openai_body["error"]["code"] == "class_paused" and openai_body["error"]["type"] == "permission_error"
    claude = json.loads(anthropic.error_body(error))
    assert anthropic.error_status(error) == 403
    assert claude["type"] == "error" and claude["error"]["type"] == "permission_error"
    assert claude["error"]["message"].startswith("class_paused: Your class is paused")
    assert claude["error"]["code"] == "class_paused"
    assert json.loads(ollama.error_body(error)) == {"error": "class_paused: Your class is paused by Ms. T until 14:30."}


def test_an_overflow_in_anthropic_envelopes_uses_the_words_claude_code_compacts_on() -> None:
    error = errors.context_length_exceeded(prompt_tokens=21000, context_tokens=20480)
    message = json.loads(anthropic.error_body(error))["error"]["message"]
    # Claude Code 2.1.197 retries after compacting when the message includes this (any case).
    assert "prompt is too long" in message.lower()
    assert message.startswith("context_length_exceeded: ") and "21000 tokens long" in message
    assert "prompt is too long" not in json.loads(openai_chat.error_body(error))["error"]["message"].lower()


def test_ordinary_errors_keep_their_plain_message_in_anthropic_envelopes() -> None:
    claude = json.loads(anthropic.error_body(errors.model_not_found("x")))
    assert claude["error"]["message"].startswith("The model `x`") and claude["error"]["code"] == "model_not_found"


# --- through the routes --------------------------------------------------------------------

pytestmark_db = pytest.mark.django_db(transaction=True)

ROUTES = {
    "openai": ("post", "/v1/chat/completions", "bearer"),
    "anthropic": ("post", "/v1/messages", "x-api-key"),
    "models": ("get", "/v1/models", "bearer"),
    "ollama": ("get", "/ollama/{key}/api/tags", "path"),
}


def ask(route: str, raw: str) -> tuple[int, dict]:
    method, path, how = ROUTES[route]
    client = ApiClient()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"} if how == "bearer" else (
        {"HTTP_X_API_KEY": raw} if how == "x-api-key" else {})
    body = json.dumps({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    if method == "post":
        response = client.post(path, body, content_type="application/json", **headers)
    else:
        response = client.get(path.format(key=raw), **headers)
    return response.status_code, response.json()


def code_of(route: str, body: dict) -> str:
    if route == "ollama":
        return body["error"].split(":", 1)[0]
    return body["error"]["code"]


@pytestmark_db
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_disabled_students_key_says_the_account_is_disabled_not_that_the_key_is_wrong(
        route: str, student, teacher) -> None:  # noqa: ANN001
    _key, raw = key_issue(user=student)
    user_set_active(user=student, active=False, actor=teacher)
    status, body = ask(route, raw)
    assert status == 403 and code_of(route, body) == "account_disabled", body
    text = json.dumps(body)
    assert "disabled" in text and "create a new" not in text


@pytestmark_db
def test_an_account_past_its_access_end_is_refused_as_account_disabled_with_the_date(student) -> None:  # noqa: ANN001
    student.access_expires_at = timezone.now() - timedelta(days=1)
    student.save(update_fields=["access_expires_at"])
    _key, raw = key_issue(user=student)
    status, body = ask("openai", raw)
    assert status == 403 and body["error"]["code"] == "account_disabled"
    assert "ended on" in body["error"]["message"]


@pytestmark_db
def test_a_revoked_key_and_a_wrong_secret_stay_invalid_api_key(student) -> None:  # noqa: ANN001
    from accounts.services import key_revoke

    key, raw = key_issue(user=student)
    assert ask("openai", raw[:-1] + ("a" if raw[-1] != "a" else "b"))[0] == 401
    key_revoke(key=key)
    status, body = ask("openai", raw)
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
