"""Property-based: whatever JSON a client sends to any dialect, parsing and planning end in a
Call and a Plan or in a 400 ApiError — never another exception (which the gateway would turn
into a 500). Values are drawn around each dialect's real field names, so the checks past the
first few are reached too."""
from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ApiError
from inference.protocols import anthropic, openai_chat, openai_completions, responses
from inference.protocols.base import Target

NAMES = ["model", "messages", "role", "content", "type", "text", "tools", "tool_choice", "function", "name",
         "arguments", "parameters", "input_schema", "input", "instructions", "max_tokens", "max_output_tokens",
         "max_completion_tokens", "stream", "system", "tool_use_id", "tool_call_id", "tool_calls", "call_id",
         "output", "id", "prompt", "stop", "stop_sequences", "n", "temperature", "top_p", "text", "format",
         "schema", "previous_response_id", "thinking", "metadata", "cache_control", "stream_options"]
WORDS = ["user", "assistant", "system", "developer", "tool", "function", "text", "tool_use", "tool_result",
         "function_call", "function_call_output", "message", "reasoning", "auto", "any", "none", "required",
         "namespace", "custom", "web_search", "json_schema", "image", "input_text", "m"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(WORDS), st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(NAMES), inner, max_size=5)), max_leaves=25)
bodies = st.dictionaries(st.sampled_from(NAMES), values, max_size=8)

DIALECTS = [openai_chat, openai_completions, responses, anthropic]


def check(module: Any, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    try:
        call = module.parse(raw)
    except ApiError as error:
        assert error.status == 400, error
        return
    try:
        plan = module.plan(call, Target(max_tokens=16))
    except ApiError as error:
        assert error.status == 400, error
        return
    json.dumps(plan.body)  # what goes to the worker serializes


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies)
def test_random_bodies_parse_or_get_a_400_in_every_dialect(body: dict[str, Any]) -> None:
    for module in DIALECTS:
        check(module, body)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(st.dictionaries(st.sampled_from(NAMES), values, max_size=4), min_size=1, max_size=4),
       extra=st.dictionaries(st.sampled_from(NAMES), values, max_size=3))
def test_random_messages_in_an_otherwise_valid_request(messages: list[Any], extra: dict[str, Any]) -> None:
    check(openai_chat, {"model": "m", "messages": messages, **extra})
    check(anthropic, {"model": "m", "max_tokens": 8, "messages": messages, **extra})
    check(responses, {"model": "m", "input": messages, **extra})


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200))
def test_random_bytes_get_a_400(raw: bytes) -> None:
    for module in DIALECTS:
        try:
            module.parse(raw)
        except ApiError as error:
            assert error.status == 400
