"""The Anthropic dialect accepts what Claude Code really sends, and always returns a valid event
sequence, whatever the worker streamed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ApiError
from inference.protocols import anthropic
from inference.protocols.base import Target

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "clients"


def raw(body: object) -> bytes:
    return json.dumps(body).encode()


CLAUDE_CODE_LIKE = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "stream": True,
    "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Say hello", "cache_control": {"type": "ephemeral"}}]},
        {"role": "system", "content": "Available agents: general-purpose"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"},
                                          {"type": "text", "text": "Hi"}]},
        {"role": "user", "content": "again"},
    ],
    "thinking": {"type": "adaptive"},
    "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    "output_config": {"effort": "high"},
    "metadata": {"user_id": json.dumps({"device": "x"})},
    "service_tier": "auto",
    "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"},
               "cache_control": {"type": "ephemeral"}},
              {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
    "some_future_field": {"x": 1},
}


def test_claude_codes_request_is_accepted_and_cleaned_for_the_worker() -> None:
    call = anthropic.parse(raw(CLAUDE_CODE_LIKE))
    plan = anthropic.plan(call, Target(max_tokens=512))
    body = plan.body
    # the chat route: the native /v1/messages ignores id_slot and cache_prompt (docs/classroom.md)
    assert plan.path == "/v1/chat/completions"
    # the system message stays where Claude Code put it, after the system prompt
    assert [m["role"] for m in body["messages"]] == ["system", "user", "system", "assistant", "user"]
    assert body["messages"][0]["content"] == "You are Claude Code."
    assert body["messages"][2]["content"] == "Available agents: general-purpose"
    assert body["messages"][3]["content"] == "Hi"  # thinking dropped
    assert body["max_tokens"] == 512 and body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert [t["function"]["name"] for t in body["tools"]] == ["Bash"]  # the server tool is left out
    assert "cache_control" not in json.dumps(body)
    assert set(body) <= {"model", "messages", "max_tokens", "stream", "stream_options", "tools", "tool_choice",
                         "temperature", "top_p", "top_k", "stop"}


def test_captured_claude_code_requests_parse(tmp_path: Path) -> None:
    captured = sorted(FIXTURES.glob("claude*.json"))
    if not captured:
        pytest.skip("no captured Claude Code request in tests/fixtures/clients")
    for path in captured:
        fixture = json.loads(path.read_text())
        for request in fixture.get("requests", [fixture]):
            body = request.get("body", request)
            if isinstance(body, dict) and "messages" in body and "max_tokens" in body:
                anthropic.plan(anthropic.parse(raw(body)), Target(max_tokens=64))


@pytest.mark.parametrize("bad", [
    {"tool_choice": {"type": {}}}, {"tool_choice": {"type": "tool", "name": "nope"}},
    {"messages": [{"role": {}, "content": "x"}]}, {"messages": [{"role": "user", "content": [{"type": 5}]}]},
    {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
    {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": 1, "name": "x"}]}]},
    {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
    {"system": 5}, {"max_tokens": -1}, {"max_tokens": None},
])
def test_malformed_fields_get_a_400(bad: dict[str, object]) -> None:
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}], **bad}
    with pytest.raises(ApiError) as caught:
        anthropic.parse(raw(body))
    assert caught.value.status == 400


def events(stream: bytes) -> list[str]:
    return [line[7:] for line in stream.decode().split("\n") if line.startswith("event: ")]


def feed_all(translator: anthropic.StreamTranslator, worker_stream: bytes, piece: int = 7) -> bytes:
    out = b"".join(b"".join(translator.feed(worker_stream[i:i + piece])) for i in range(0, len(worker_stream), piece))
    return out + b"".join(translator.end())


def chunk(**delta: object) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"


def datas(stream: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in stream.decode().split("\n") if line.startswith("data: ")]


USAGE = b"data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 91, "completion_tokens": 3,
                                                          "prompt_tokens_details": {"cached_tokens": 90}}}).encode()


def test_text_then_tool_calls_become_blocks_in_order_even_split_across_reads() -> None:
    worker = (chunk(role="assistant", content="") + chunk(content="\U0001F44B ") + chunk(content="hi")
              + chunk(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "Bash", "arguments": '{"cmd"'}}])
              + chunk(tool_calls=[{"index": 0, "function": {"arguments": ': "ls"}'}}])
              + chunk(tool_calls=[{"index": 1, "id": "c2", "function": {"name": "Read", "arguments": "{}"}}])
              + b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}\n\n'
              + USAGE + b"\n\ndata: [DONE]\n\n")
    out = feed_all(anthropic.StreamTranslator(model="m"), worker)
    assert events(out) == ["message_start",
                           "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                           "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                           "content_block_start", "content_block_delta", "content_block_stop",
                           "message_delta", "message_stop"]
    data = datas(out)
    assert "".join(d["delta"]["text"] for d in data if d.get("delta", {}).get("type") == "text_delta") == "\U0001F44B hi"
    starts = [d for d in data if d["type"] == "content_block_start"]
    assert [(d["index"], d["content_block"]["type"], d["content_block"].get("name")) for d in starts] == [
        (0, "text", None), (1, "tool_use", "Bash"), (2, "tool_use", "Read")]
    arguments = "".join(d["delta"]["partial_json"] for d in data
                        if d.get("delta", {}).get("type") == "input_json_delta" and d["index"] == 1)
    assert json.loads(arguments) == {"cmd": "ls"}
    final = [d for d in data if d["type"] == "message_delta"][0]
    assert final["delta"]["stop_reason"] == "tool_use"
    # the counts are the student's own (the chat route is pinned to their slot)
    assert final["usage"] == {"input_tokens": 1, "cache_read_input_tokens": 90, "output_tokens": 3}


def test_a_stream_cut_short_is_still_a_closed_message() -> None:
    out = feed_all(anthropic.StreamTranslator(model="m"), chunk(content="a"))
    assert events(out) == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                           "message_delta", "message_stop"]


def test_a_whole_answer_is_translated_with_its_usage() -> None:
    call = anthropic.parse(raw({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}))
    plan = anthropic.plan(call, Target(max_tokens=5))
    assert plan.convert is not None
    answer = plan.convert({"choices": [{"message": {"content": "Hello"}, "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 9, "completion_tokens": 5}})
    assert answer["content"] == [{"type": "text", "text": "Hello"}] and answer["stop_reason"] == "max_tokens"
    assert answer["usage"] == {"input_tokens": 9, "cache_read_input_tokens": 0, "output_tokens": 5}


def test_claude_codes_billing_header_is_not_sent_to_the_worker_so_its_system_prompt_is_the_same_every_task() -> None:
    """Its first system block names a hash of the task's first message (cc_version=<version>.<3 hex>):
    left in, no cache could hold the system prompt across tasks or students."""
    blocks = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.417; cc_entrypoint=sdk-cli;"},
              {"type": "text", "text": "You are Claude Code."}, {"type": "text", "text": " Be brief."}]
    system, _ = anthropic.worker_messages({"system": blocks, "messages": [{"role": "user", "content": "hi"}]})
    assert system == "You are Claude Code. Be brief."
    assert anthropic.worker_messages({"system": "x-anthropic-billing-header: kept as a string",
                                      "messages": [{"role": "user", "content": "hi"}]})[0].startswith("x-anthropic")
