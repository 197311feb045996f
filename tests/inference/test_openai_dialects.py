from __future__ import annotations

import json

import pytest

from core.errors import ApiError, from_llama_server
from inference.protocols import openai_chat, openai_completions
from inference.protocols.base import Target
from inference.validation import output_cap, parse_json_object

validate_chat = openai_chat.parse
validate_completion = openai_completions.parse


def raw(body: object) -> bytes:
    return json.dumps(body).encode()


GOOD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_valid_request_is_accepted_and_stream_flag_read() -> None:
    chat = validate_chat(raw({**GOOD, "stream": True}))
    assert (chat.model, chat.stream) == ("m", True)
    assert validate_chat(raw(GOOD)).stream is False


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        (b"", None, "empty"),
        (b"{not json", None, "not valid JSON"),
        (b"\xff\xfe{}", None, "UTF-8"),
        (raw([1, 2]), None, "JSON object"),
        (raw({"messages": GOOD["messages"]}), "model", "model"),
        (raw({"model": 5, "messages": GOOD["messages"]}), "model", "non-empty string"),
        (raw({"model": "m"}), "messages", "messages"),
        (raw({"model": "m", "messages": "hi"}), "messages", "array"),
        (raw({"model": "m", "messages": []}), "messages", "at least one"),
        (raw({"model": "m", "messages": ["hi"]}), "messages[0]", "object"),
        (raw({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}), "messages[0].role", "wizard"),
        (raw({"model": "m", "messages": [{"role": "user", "content": 5}]}), "messages[0].content", "string"),
        (raw({"model": "m", "messages": [{"role": "user"}]}), "messages[0].content", "required"),
        (raw({**GOOD, "stream": "yes"}), "stream", "true or false"),
        (raw({**GOOD, "max_tokens": 0}), "max_tokens", "between"),
        (raw({**GOOD, "max_tokens": 10**9}), "max_tokens", "between"),
        (raw({**GOOD, "max_tokens": "10"}), "max_tokens", "integer"),
        (raw({**GOOD, "temperature": 7}), "temperature", "between"),
        (raw({**GOOD, "stream_options": "x"}), "stream_options", "object"),
    ],
)
def test_bad_requests_get_a_400_naming_the_parameter(body: bytes, param: str | None, fragment: str) -> None:
    with pytest.raises(ApiError) as caught:
        validate_chat(body)
    error = caught.value
    assert error.status == 400 and error.type == "invalid_request_error"
    assert error.param == param
    assert fragment in error.message
    envelope = json.loads(error.openai_json())
    assert set(envelope["error"]) == {"message", "type", "param", "code"}


def test_output_cap_applies_when_client_sends_none_and_bounds_larger_requests() -> None:
    def planned(extra: dict[str, object]) -> dict[str, object]:
        call = validate_chat(raw({**GOOD, **extra}))
        return openai_chat.plan(call, Target(max_tokens=output_cap(call.max_tokens, cap=512))).body

    assert planned({})["max_tokens"] == 512
    assert planned({"max_tokens": 50})["max_tokens"] == 50
    assert planned({"max_tokens": 5000})["max_tokens"] == 512
    capped = planned({"max_completion_tokens": 60})
    assert capped["max_tokens"] == 60 and "max_completion_tokens" not in capped


def test_only_allow_listed_fields_reach_the_worker() -> None:
    """llama-server's own knobs would step around the output cap and the token budget, or probe
    another student's cached prompt: none of them is forwarded."""
    knobs = {"n_predict": -1, "id_slot": 0, "cache_prompt": True, "samplers": ["top_k"], "lora": [{"id": 0}],
             "grammar": "root ::= \"x\"", "n_probs": 10, "chat_template_kwargs": {}, "max_tokens": 40,
             "temperature": 0.5, "stop": ["\n"], "user": "x", "ignore_eos": True}
    body = openai_chat.plan(validate_chat(raw({**GOOD, **knobs})), Target(max_tokens=40)).body
    # ignore_eos stays: it makes the worker generate max_tokens, which the cap and the reservation bound
    assert set(body) == {"model", "messages", "max_tokens", "temperature", "stop", "ignore_eos"}
    completion = openai_completions.parse(raw({"model": "m", "prompt": "x", "n_predict": -1, "id_slot": 1}))
    assert set(openai_completions.plan(completion, Target(max_tokens=8)).body) == {"model", "prompt", "max_tokens"}


@pytest.mark.parametrize("bad", [
    {"max_tokens": -1}, {"max_completion_tokens": -1}, {"max_tokens": 0}, {"max_tokens": 10**12},
    {"tool_choice": {"type": "function", "function": [None, None]}}, {"tool_choice": {"type": {}}},
    {"n": 2}, {"stop": [1]}, {"messages": [{"role": {}, "content": "x"}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "assistant", "content": None, "tool_calls": "x"}]},
])
def test_hostile_chat_fields_get_a_400(bad: dict[str, object]) -> None:
    with pytest.raises(ApiError) as caught:
        validate_chat(raw({**GOOD, **bad}))
    assert caught.value.status == 400


@pytest.mark.parametrize("body", [
    b'{"model": "m", "x": NaN}', b'{"model": "m", "x": Infinity}', b'{"model": "m", "x": "\\ud800"}',
    b'{"model": "m", "temperature": 1e400}', b'{"model": "m", "x": [-1.5e309]}',
    b'{"model": "m", "x": ' + b"9" * 5000 + b"}", b'{"model": "m", "x": ' + b"[" * 1000 + b"]" * 1000 + b"}",
    b'{"model": "m", "x": ' + b"[" * 200000 + b"]" * 200000 + b"}",
])
def test_json_that_would_break_later_steps_is_refused_up_front(body: bytes) -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_object(body)
    assert caught.value.status == 400


def test_a_number_outside_the_double_range_is_refused_by_name() -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_object(b'{"model": "m", "temperature": 1e400}')
    assert caught.value.status == 400 and "1e400" in caught.value.message
    assert parse_json_object(b'{"x": 1e-400, "y": 1.7e308}') == {"x": 0.0, "y": 1.7e308}  # underflow is 0, fine


def test_valid_unicode_and_moderate_nesting_pass() -> None:
    assert parse_json_object('{"x": "\\ud83d\\ude00 é"}'.encode())["x"] == "\U0001F600 é"
    assert parse_json_object(b'{"x": ' + b"[" * 30 + b"]" * 30 + b"}")


def test_llama_server_context_overflow_becomes_context_length_exceeded() -> None:
    body = raw({"error": {"code": 400, "message": "request (9000 tokens) exceeds the available context size "
                          "(4096 tokens)", "type": "exceed_context_size_error"}})
    error = from_llama_server(400, body)
    assert (error.status, error.code, error.param) == (400, "context_length_exceeded", "messages")
    assert "9000" in error.message and "4096" in error.message


def test_llama_server_5xx_and_garbage_become_upstream_errors() -> None:
    assert from_llama_server(500, b"<html>oops</html>").status == 502
    assert from_llama_server(503, raw({"error": {"type": "unavailable_error", "message": "Loading model"}})).code == "upstream_error"


def test_completions_need_a_prompt_of_text_or_tokens() -> None:
    assert validate_completion(raw({"model": "m", "prompt": "Once upon"})).model == "m"
    assert validate_completion(raw({"model": "m", "prompt": [1, 2, 3], "stream": True})).stream
    for bad, fragment in [({"model": "m"}, "prompt"), ({"model": "m", "prompt": []}, "prompt"),
                          ({"model": "m", "prompt": [True]}, "prompt"), ({"prompt": "x"}, "model"),
                          ({"model": "m", "prompt": "x", "max_tokens": -1}, "max_tokens"),
                          ({"model": "m", "prompt": ["one", "two"]}, "prompt")]:
        with pytest.raises(ApiError) as caught:
            validate_completion(raw(bad))
        assert caught.value.status == 400 and caught.value.param == fragment
