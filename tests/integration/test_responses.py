"""POST /v1/responses through the real gateway and llama-server, driven by the official openai
SDK: responses.create and responses.stream, text and tools, and the errors it maps to classes."""
from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.conftest import MODEL_ID, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def client_for(gateway, raw_key: str) -> openai.OpenAI:  # noqa: ANN001
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=raw_key, max_retries=0, timeout=120)


def test_create_answers_with_text_and_usage_and_is_logged(gateway, worker, student_key) -> None:  # noqa: ANN001
    from inference.models import RequestLog

    response = client_for(gateway, student_key[1]).responses.create(
        model=MODEL_ID, instructions="Answer briefly.", input="Name a colour.", max_output_tokens=16)
    assert response.status in {"completed", "incomplete"}
    assert response.output_text
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    row = wait_for(lambda: RequestLog.objects.filter(client="responses", status=200).first(), 10)
    assert row is not None and row.completion_tokens == response.usage.output_tokens
    assert row.path == "/v1/responses"
    assert "slots busy" in row.route_reason  # the scheduler's note for the worker it chose


def test_stream_yields_the_event_sequence_and_a_final_response(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = client_for(gateway, student_key[1])
    with client.responses.stream(model=MODEL_ID, input=[{"role": "user", "content": "Say hello."}],
                                 max_output_tokens=16) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    # A reply cut by max_output_tokens ends with response.incomplete, as OpenAI's API does (the
    # SDK's get_final_response() accepts only response.completed, so read the last event).
    assert "response.output_text.delta" in kinds and kinds[-1] in {"response.completed", "response.incomplete"}
    final = events[-1].response
    assert final.output_text and final.usage.output_tokens > 0
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text


def test_a_forced_function_tool_comes_back_as_a_function_call_then_its_output_is_read(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = client_for(gateway, student_key[1])
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.responses.create(model=MODEL_ID, input=ask, tools=[WEATHER],
                                    tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=48)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert isinstance(json.loads(calls[0].arguments)["city"], str)
    with client.responses.stream(model=MODEL_ID, tools=[WEATHER], max_output_tokens=24, input=[
        *ask, {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
               "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C"},
    ]) as stream:
        final = list(stream)[-1].response
    assert final.status in {"completed", "incomplete"} and final.output and final.usage.input_tokens > 0


def test_state_it_does_not_keep_and_unknown_models_get_sdk_error_classes(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = client_for(gateway, student_key[1])
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL_ID, input="hi", previous_response_id="resp_123")
    assert caught.value.param == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")
    with pytest.raises(openai.AuthenticationError):
        client_for(gateway, "ocs-wrong").responses.create(model=MODEL_ID, input="hi")


def test_malformed_bodies_get_400_in_the_openai_envelope(gateway, worker, student_key) -> None:  # noqa: ANN001
    headers = {"Authorization": f"Bearer {student_key[1]}"}
    for body in [b"{", b'{"model": "x", "input": NaN}', json.dumps({"model": MODEL_ID, "input": {}}).encode(),
                 json.dumps({"model": MODEL_ID, "input": "x", "tools": "all"}).encode()]:
        answer = httpx.post(gateway.url + "/v1/responses", content=body, headers=headers, timeout=30)
        assert answer.status_code == 400, body
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
