from __future__ import annotations

import json

import pytest

from inference.errors import ApiError, from_llama_server
from inference.validation import apply_output_cap, validate_chat, validate_completion


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
    assert apply_output_cap({"model": "m"}, cap=512)["max_tokens"] == 512
    assert apply_output_cap({"max_tokens": 50}, cap=512)["max_tokens"] == 50
    assert apply_output_cap({"max_tokens": 5000}, cap=512)["max_tokens"] == 512
    capped = apply_output_cap({"max_completion_tokens": 60}, cap=512)
    assert capped["max_tokens"] == 60 and "max_completion_tokens" not in capped


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
                          ({"model": "m", "prompt": "x", "max_tokens": -1}, "max_tokens")]:
        with pytest.raises(ApiError) as caught:
            validate_completion(raw(bad))
        assert caught.value.status == 400 and caught.value.param == fragment
