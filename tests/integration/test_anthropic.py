"""Claude Code's protocol through the official anthropic SDK, against the real worker."""
from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.conftest import MODEL_ID

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass

WEATHER = {"name": "get_weather", "description": "Get the current weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def sdk(gateway, raw_key: str, *, bearer: bool = False) -> anthropic.Anthropic:  # noqa: ANN001
    if bearer:  # ANTHROPIC_AUTH_TOKEN
        return anthropic.Anthropic(base_url=gateway.url, auth_token=raw_key, api_key=None, max_retries=0)
    return anthropic.Anthropic(base_url=gateway.url, api_key=raw_key, max_retries=0)  # ANTHROPIC_API_KEY


@pytest.mark.parametrize("bearer", [False, True], ids=["x-api-key", "bearer"])
def test_text_streams_with_either_kind_of_auth(gateway, worker, student_key, bearer) -> None:  # noqa: ANN001
    client = sdk(gateway, student_key[1], bearer=bearer)
    with client.messages.stream(model=MODEL_ID, max_tokens=24, messages=[{"role": "user", "content": "Hello!"}],
                                system="You are a friendly tutor.",
                                extra_body={"temperature": 0}) as stream:  # greedy: no 1-token luck
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) >= 2 and "".join(pieces).strip()
    assert final.stop_reason in {"end_turn", "max_tokens"} and final.usage.output_tokens > 0


def test_a_forced_tool_streams_as_a_tool_use_block_with_input_json_deltas(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = sdk(gateway, student_key[1])
    kinds = []
    with client.messages.stream(model=MODEL_ID, max_tokens=64, messages=ASK, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"}) as stream:
        for event in stream:
            kinds.append(event.type if event.type != "content_block_delta" else event.delta.type)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "input_json_delta" in kinds
    block = final.content[0]
    assert block.type == "tool_use" and block.name == "get_weather" and block.id.startswith("toolu_")
    assert isinstance(block.input["city"], str)
    assert final.stop_reason == "tool_use"


def test_a_forced_tool_without_streaming_and_with_any(gateway, worker, student_key) -> None:  # noqa: ANN001
    message = sdk(gateway, student_key[1]).messages.create(
        model=MODEL_ID, max_tokens=64, messages=ASK, tools=[WEATHER], tool_choice={"type": "any"})
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "tool_use" and "city" in message.content[0].input


def test_count_tokens_uses_the_workers_tokenizer(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = sdk(gateway, student_key[1])
    short = client.messages.count_tokens(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}])
    long = client.messages.count_tokens(model=MODEL_ID, messages=[{"role": "user", "content": "Hi " * 50}])
    assert short.input_tokens > 0 and long.input_tokens >= short.input_tokens + 40


def test_unknown_claude_models_go_to_the_default_and_betas_are_ignored(gateway, worker, student_key) -> None:  # noqa: ANN001
    response = httpx.post(
        gateway.url + "/v1/messages?beta=true",
        headers={"x-api-key": student_key[1], "anthropic-version": "2023-06-01",
                 "anthropic-beta": "interleaved-thinking-2025-05-14,some-future-beta-2027-01-01"},
        json={"model": "claude-haiku-4-5-20251001", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.json()["type"] == "message"


def test_errors_come_in_anthropics_envelope_and_sdk_classes(gateway, worker, student_key) -> None:  # noqa: ANN001
    with pytest.raises(anthropic.AuthenticationError):
        sdk(gateway, "ocs-aaaaaaaaaa-" + "A" * 40).messages.create(model=MODEL_ID, max_tokens=4, messages=ASK)
    with pytest.raises(anthropic.NotFoundError) as caught:
        sdk(gateway, student_key[1]).messages.create(model="gpt-17", max_tokens=4, messages=ASK)
    assert caught.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError):
        sdk(gateway, student_key[1]).messages.create(model=MODEL_ID, max_tokens=4, messages=[])
    headers = {"x-api-key": student_key[1]}
    for body in [b"{nope", b'{"model": "x", "messages": [{"role": "user", "content": "x"}]}',
                 b'{"model": "x", "max_tokens": 5, "messages": [{"role": "wizard", "content": "x"}]}']:
        response = httpx.post(gateway.url + "/v1/messages", content=body, headers=headers)
        assert response.status_code == 400
        assert response.json()["type"] == "error" and response.json()["error"]["type"] == "invalid_request_error"
