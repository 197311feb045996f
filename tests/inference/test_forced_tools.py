from __future__ import annotations

import json

import pytest

from core.errors import ApiError
from inference.forced_tools import StreamConverter, convert_response, plan_forced_tool, rewrite_request

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


def test_auto_none_and_absent_tool_choice_are_left_to_the_worker() -> None:
    for choice in [None, "auto", "none"]:
        assert plan_forced_tool({"tools": [WEATHER], "tool_choice": choice}) is None


def test_a_named_tool_choice_is_forced_with_its_parameters_as_the_schema() -> None:
    plan = plan_forced_tool({"tools": [WEATHER, TIME], "tool_choice": {"type": "function",
                                                                        "function": {"name": "get_weather"}}})
    assert plan.names == ("get_weather",) and plan.single
    body = rewrite_request({"model": "m", "messages": MESSAGES, "tools": [WEATHER], "tool_choice": "x",
                            "parallel_tool_calls": False}, plan)
    assert "tools" not in body and "tool_choice" not in body and "parallel_tool_calls" not in body
    assert body["response_format"]["json_schema"]["schema"] == WEATHER["function"]["parameters"]
    assert body["messages"][0]["role"] == "system" and "get_weather" in body["messages"][0]["content"]
    assert body["messages"][1:] == MESSAGES


def test_required_with_several_tools_forces_a_choice_between_them() -> None:
    plan = plan_forced_tool({"tools": [WEATHER, TIME], "tool_choice": "required"})
    assert plan.names == ("get_weather", "get_time") and not plan.single
    variants = plan.schema["anyOf"]
    assert [v["properties"]["name"]["const"] for v in variants] == ["get_weather", "get_time"]
    assert plan_forced_tool({"tools": [TIME], "tool_choice": "required"}).single


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not in `tools`"),
        ({"tool_choice": "required"}, "no `tools`"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "`tool_choice` must be"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "not supported"),
        ({"tools": "get_weather", "tool_choice": "required"}, "`tools` must be an array"),
        ({"tools": [{"type": "function"}], "tool_choice": "required"}, "tools[0]"),
    ],
)
def test_inconsistent_tool_requests_are_400s(body: dict, fragment: str) -> None:
    with pytest.raises(ApiError) as caught:
        plan_forced_tool(body)
    assert caught.value.status == 400 and fragment in caught.value.message


def test_a_constrained_answer_becomes_a_tool_call() -> None:
    plan = plan_forced_tool({"tools": [WEATHER], "tool_choice": "required"})
    data = {"choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": '{\n "city": "Paris"\n}'}}]}
    choice = convert_response(data, plan)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert choice["message"]["content"] is None


def sse(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def delta(content: str | None = None, finish: str | None = None) -> bytes:
    d = {"content": content} if content is not None else {}
    return sse({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]})


def test_a_streamed_single_tool_call_streams_its_arguments_as_deltas_even_split_across_reads() -> None:
    plan = plan_forced_tool({"tools": [WEATHER], "tool_choice": {"type": "function",
                                                                  "function": {"name": "get_weather"}}})
    converter = StreamConverter(plan)
    raw = delta('{"ci') + delta('ty": "Paris"}') + delta(finish="stop") + sse({"choices": [], "usage": {
        "completion_tokens": 7}}) + b"data: [DONE]\n\n"
    out = b"".join(b"".join(converter.feed(raw[i:i + 7])) for i in range(0, len(raw), 7))
    events = [e for e in out.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if c["choices"] and
             "tool_calls" in c["choices"][0]["delta"]]
    assert calls[0]["id"].startswith("call_") and calls[0]["function"]["name"] == "get_weather"
    assert all("id" not in c for c in calls[1:])
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"city": "Paris"}
    assert chunks[2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[3]["usage"] == {"completion_tokens": 7}
    assert not any("content" in c["choices"][0]["delta"] for c in chunks if c["choices"])


def test_a_streamed_choice_between_tools_is_emitted_whole_at_the_end() -> None:
    plan = plan_forced_tool({"tools": [WEATHER, TIME], "tool_choice": "required"})
    converter = StreamConverter(plan)
    raw = delta('{"name": "get_time", ') + delta('"arguments": {}}') + delta(finish="stop")
    chunks = [json.loads(e[6:]) for e in b"".join(converter.feed(raw)).split(b"\n\n") if e]
    calls = [c["choices"][0]["delta"].get("tool_calls") for c in chunks]
    assert calls[:2] == [None, None]
    assert calls[2][0]["function"] == {"name": "get_time", "arguments": "{}"}
    assert chunks[2]["choices"][0]["finish_reason"] == "tool_calls"
