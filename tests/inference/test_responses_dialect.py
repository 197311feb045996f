"""The Responses dialect: requests as Codex and the SDKs send them become chat requests for the
worker; the worker's chat answer becomes a Response or the Responses event sequence."""
from __future__ import annotations

import json

import pytest

from core.errors import ApiError
from inference.protocols import responses
from inference.protocols.base import Target


def raw(body: object) -> bytes:
    return json.dumps(body).encode()


CODEX_LIKE = {
    "model": "m", "instructions": "You are Codex.", "stream": True, "store": False,
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox: read-only"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xx"},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\": \"ls\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.py"},
    ],
    "tools": [
        {"type": "function", "name": "shell", "description": "run", "parameters": {"type": "object"}, "strict": False},
        {"type": "namespace", "name": "mcp", "tools": [{"type": "function", "name": "mcp__read", "parameters": {}}]},
        {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}},
        {"type": "web_search"},
    ],
    "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "medium", "summary": "auto"},
    "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k", "client_metadata": {"x": "y"},
}


def test_codex_shaped_request_becomes_a_chat_request() -> None:
    call = responses.parse(raw(CODEX_LIKE))
    body = responses.plan(call, Target(max_tokens=128)).body
    assert [m["role"] for m in body["messages"]] == ["system", "system", "user", "assistant", "tool"]
    assert body["messages"][0]["content"] == "You are Codex."
    assert body["messages"][3]["tool_calls"][0]["function"] == {"name": "shell", "arguments": "{\"cmd\": \"ls\"}"}
    assert body["messages"][4] == {"role": "tool", "tool_call_id": "call_1", "content": "a.py"}
    assert [t["function"]["name"] for t in body["tools"]] == ["shell", "mcp__read", "apply_patch"]
    assert body["max_tokens"] == 128 and body["stream"] is True
    assert set(body) <= {"model", "messages", "max_tokens", "stream", "stream_options", "tools", "tool_choice",
                         "parallel_tool_calls", "temperature", "top_p", "response_format"}


@pytest.mark.parametrize(("bad", "param"), [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": []}, "input"), ({"input": 5}, "input"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "function_call", "name": 5}]}, "input[0]"),
    ({"max_output_tokens": -1}, "max_output_tokens"), ({"tools": [{"type": "function"}]}, "tools[0].name"),
    ({"tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"), ({"tool_choice": 7}, "tool_choice"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
])
def test_what_cannot_be_served_gets_a_400_naming_it(bad: dict[str, object], param: str) -> None:
    with pytest.raises(ApiError) as caught:
        responses.parse(raw({"model": "m", "input": "hi", **bad}))
    assert caught.value.status == 400 and caught.value.param == param


def test_a_whole_chat_answer_becomes_a_response_with_usage() -> None:
    call = responses.parse(raw({"model": "m", "input": "hi", "tools": [CODEX_LIKE["tools"][0]]}))
    chat = {"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Let me look.",
            "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5}}
    response = responses.from_chat(call, chat)
    assert response["object"] == "response" and response["status"] == "completed" and response["store"] is False
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][0]["content"][0] == {"type": "output_text", "text": "Let me look.", "annotations": [],
                                                   "logprobs": []}
    assert response["output"][1]["call_id"] == "call_9" and response["output"][1]["name"] == "shell"
    assert response["usage"]["input_tokens"] == 12 and response["usage"]["output_tokens"] == 5
    assert response["usage"]["total_tokens"] == 17


def chunk(**delta: object) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode() + b"\n\n"


def translate(call_body: dict[str, object], worker: bytes, piece: int = 11) -> list[dict[str, object]]:
    translator = responses.StreamTranslator(responses.parse(raw(call_body)))
    out = b"".join(b"".join(translator.feed(worker[i:i + piece])) for i in range(0, len(worker), piece))
    out += b"".join(translator.end())
    return [json.loads(line[6:]) for line in out.decode().split("\n") if line.startswith("data: ")]


def test_streamed_text_becomes_the_responses_event_sequence() -> None:
    worker = (chunk(role="assistant", content="") + chunk(content="Hel") + chunk(content="lo")
              + b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
              + b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n'
              + b"data: [DONE]\n\n")
    events = translate({"model": "m", "input": "hi", "stream": True}, worker)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[6]["text"] == "Hello"
    completed = events[-1]["response"]
    assert completed["output"][0]["content"][0]["text"] == "Hello"
    assert completed["usage"]["output_tokens"] == 2


def test_streamed_tool_calls_become_function_call_items() -> None:
    worker = (chunk(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                 "function": {"name": "shell", "arguments": ""}}])
              + chunk(tool_calls=[{"index": 0, "function": {"arguments": "{\"cmd\":"}}])
              + chunk(tool_calls=[{"index": 0, "function": {"arguments": " \"ls\"}"}}])
              + b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}\n\n'
              + b"data: [DONE]\n\n")
    events = translate({"model": "m", "input": "hi", "stream": True, "tools": [CODEX_LIKE["tools"][0]]}, worker)
    kinds = [e["type"] for e in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                     "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    item = events[-2]["item"]
    assert item["type"] == "function_call" and item["call_id"] == "call_1" and item["arguments"] == "{\"cmd\": \"ls\"}"


def test_a_worker_stream_cut_short_still_completes_and_an_error_fails() -> None:
    events = translate({"model": "m", "input": "hi", "stream": True}, chunk(content="x"))
    assert events[-1]["type"] == "response.completed"
    failed = translate({"model": "m", "input": "hi", "stream": True},
                       b'data: {"error": {"message": "worker died", "code": "upstream_error"}}\n\n')
    assert [e["type"] for e in failed][-2:] == ["error", "response.failed"]
