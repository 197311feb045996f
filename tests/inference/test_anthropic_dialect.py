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
    body = anthropic.plan(call, Target(max_tokens=512)).body
    assert body["system"] == "You are Claude Code."
    # the system message stays where Claude Code put it: the worker's native route takes it there
    assert [m["role"] for m in body["messages"]] == ["user", "system", "assistant", "user"]
    assert body["messages"][1]["content"] == "Available agents: general-purpose"
    assert body["messages"][2]["content"] == [{"type": "text", "text": "Hi"}]  # thinking dropped
    assert body["max_tokens"] == 512
    assert [t["name"] for t in body["tools"]] == ["Bash"]  # the server tool is left out
    assert "cache_control" not in json.dumps(body)
    assert set(body) <= {"model", "messages", "system", "max_tokens", "stream", "tools", "tool_choice",
                         "temperature", "top_p", "top_k", "stop_sequences"}


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


def feed_all(normalizer: anthropic.StreamNormalizer, worker_stream: bytes, piece: int = 7) -> bytes:
    out = b"".join(b"".join(normalizer.feed(worker_stream[i:i + piece])) for i in range(0, len(worker_stream), piece))
    return out + b"".join(normalizer.end())


def sse(name: str, data: dict[str, object]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


WORKER_WITHOUT_MESSAGE_START = (
    sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    + sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                  "delta": {"type": "text_delta", "text": "\U0001F44B hi"}})
    + sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    + sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}})
    + sse("message_stop", {"type": "message_stop"})
)


def test_a_worker_stream_without_message_start_gets_one_first() -> None:
    out = feed_all(anthropic.StreamNormalizer(model="m"), WORKER_WITHOUT_MESSAGE_START)
    assert events(out) == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                           "message_delta", "message_stop"]
    deltas = [json.loads(line[6:]) for line in out.decode().split("\n") if line.startswith("data: ") and "text_delta" in line]
    assert [d["delta"]["text"] for d in deltas] == ["\U0001F44B hi"]


def test_a_stream_cut_short_is_closed_and_unopened_blocks_are_opened() -> None:
    worker = sse("message_start", {"type": "message_start", "message": {"id": "x"}}) + sse(
        "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}})
    out = feed_all(anthropic.StreamNormalizer(model="m"), worker)
    assert events(out) == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                           "message_delta", "message_stop"]


def test_a_well_formed_stream_passes_through_unchanged() -> None:
    worker = sse("message_start", {"type": "message_start", "message": {"id": "x"}}) + WORKER_WITHOUT_MESSAGE_START
    worker = worker[:-len(sse("message_stop", {"type": "message_stop"}))] + sse("ping", {"type": "ping"}) + sse(
        "message_stop", {"type": "message_stop"})
    assert feed_all(anthropic.StreamNormalizer(model="m"), worker) == worker
