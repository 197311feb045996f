"""The replay's personas: request shapes from the captured clients, grown turn by turn as each
client grows a conversation, scaled without changing shape. Pure: no database, no server."""
from __future__ import annotations

import json
import random

import pytest

from research.class_personas import (PERSONA_SHAPES, Conversation, captured_body, estimate_tokens, parse_mix,
                                     roster, scale_text)
from research.class_replay import content_of, error_message, gateway_root, refusal_reason

pytestmark = pytest.mark.backend_neutral  # pure: no database, no live state


def conversation(persona: str, scale: float = 0.1, context: int = 100_000, seed: int = 1) -> Conversation:
    return Conversation(PERSONA_SHAPES[persona], 1, random.Random(seed), scale=scale, context_tokens=context)


def test_mix_and_roster() -> None:
    assert parse_mix("agent:2,claude:1,chat:0") == {"agent": 2, "claude": 1}
    assert roster({"agent": 2, "burst": 1}) == [("replay-agent-01", "agent"), ("replay-agent-02", "agent"),
                                                ("replay-burst-01", "burst")]
    for bad in ("agent", "robot:2", "agent:x", "agent:-1", "chat:0"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def test_copilot_cli_turns_keep_its_shape_and_grow_with_tool_calls_and_results() -> None:
    captured = captured_body("copilot-completions")
    talk = conversation("agent")
    path, first = talk.request()
    assert path == "/v1/chat/completions"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert len(first["tools"]) == len(captured["tools"]) and first["stream"] is True
    assert "# Tools" in first["messages"][0]["content"]  # counted as sent: the template drops tools
    talk.grow("I will read the file.")
    _, second = talk.request()
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    call = second["messages"][2]["tool_calls"][0]
    assert second["messages"][3]["tool_call_id"] == call["id"]
    assert call["function"]["name"] in {t["function"]["name"] for t in captured["tools"]}
    assert second["messages"][:2] == first["messages"]  # the prefix is resent unchanged
    assert estimate_tokens(second) > estimate_tokens(first)


def test_claude_code_turns_append_tool_use_and_tool_result_blocks() -> None:
    talk = conversation("claude")
    path, first = talk.request()
    assert path == "/v1/messages"
    assert {"thinking", "context_management", "output_config", "metadata", "system", "tools"} <= set(first)
    assert [m["role"] for m in first["messages"]] == ["user", "system"]  # Claude Code's mid-conversation system
    talk.grow("Reading it.")
    _, second = talk.request()
    assistant, result = second["messages"][-2:]
    assert [b["type"] for b in assistant["content"]] == ["text", "tool_use"]
    assert result["role"] == "user" and result["content"][0]["tool_use_id"] == assistant["content"][1]["id"]


def test_codex_turns_append_function_call_items() -> None:
    talk = conversation("codex")
    path, first = talk.request()
    assert path == "/v1/responses"
    assert [item.get("role") for item in first["input"]] == ["developer", "developer", "user", "user"]
    assert any(tool["type"] == "namespace" for tool in first["tools"]) and first["store"] is False
    talk.grow("ok")
    _, second = talk.request()
    assert [item.get("type") for item in second["input"][-3:]] == ["message", "function_call", "function_call_output"]
    assert second["input"][-1]["call_id"] == second["input"][-2]["call_id"]


def test_scale_shrinks_sizes_not_shapes() -> None:
    def shape(value: object) -> object:
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape(v) for v in value]
        return type(value).__name__

    for persona in ("agent", "claude", "codex"):
        full, small = conversation(persona, scale=1.0).request()[1], conversation(persona, scale=0.1).request()[1]
        assert shape(small) == shape(full)
        assert estimate_tokens(small) < estimate_tokens(full) * 0.3
    assert scale_text("word " * 100, 0.1).count("word") < 20 and scale_text("short text", 0.01) == "short text"


def test_a_conversation_that_would_not_fit_starts_a_new_task() -> None:
    talk = conversation("agent", scale=0.05, context=3000)
    sizes = []
    for _ in range(30):
        sizes.append(estimate_tokens(talk.request()[1]))
        talk.grow("x")
    assert max(sizes) <= 3000 and talk.tasks > 1


def test_chat_and_burst_students() -> None:
    chat = conversation("chat")
    _, body = chat.request()
    chat.grow("A list comprehension is...")
    assert [m["role"] for m in chat.request()[1]["messages"]] == ["system", "user", "assistant", "user"]
    burst = conversation("burst")
    first = burst.request()[1]
    burst.grow("looks fine")
    second = burst.request()[1]
    assert len(second["messages"]) == 1 and second != first  # independent requests, back to back
    assert PERSONA_SHAPES["burst"].think_s == (0.0, 0.0)


def test_same_seed_same_students() -> None:
    a, b = conversation("claude", seed=7), conversation("claude", seed=7)
    for _ in range(3):
        assert json.dumps(a.request()) == json.dumps(b.request())
        a.grow("y")
        b.grow("y")


def test_stream_events_of_the_three_dialects() -> None:
    assert content_of({"choices": [{"delta": {"content": "hi"}}]}) == (True, "hi")
    assert content_of({"choices": [{"delta": {"tool_calls": [{"id": "c"}]}}]})[0]
    assert content_of({"choices": [], "usage": {"prompt_tokens": 3}}) == (False, "")
    assert content_of({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "a"}}) == (True, "a")
    assert content_of({"type": "response.output_text.delta", "delta": "b"}) == (True, "b")
    assert content_of({"type": "response.function_call_arguments.delta", "delta": "{"})[0]
    assert error_message({"error": {"message": "boom"}}) == "boom"
    assert error_message({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}) == "busy"
    assert error_message({"type": "response.failed", "response": {"error": {"message": "cut"}}}) == "cut"
    assert error_message({"choices": [{"delta": {"content": "x"}}]}) is None


def test_refusal_reasons_from_the_gateways_messages() -> None:
    assert refusal_reason(429, "All workers serving `m` stayed busy for 60 s. Retry after 5 s.") == "queue_timeout"
    assert refusal_reason(429, "Too many requests at once: your limit is 2 running or waiting.") == "concurrency"
    assert refusal_reason(429, "Rate limit reached: 10 requests in the last minute") == "requests_per_minute"
    assert refusal_reason(429, "Daily token budget reached: ...") == "tokens_per_day"
    assert refusal_reason(400, "the request exceeds the available context size") == "context_length_exceeded"
    assert refusal_reason(418, "teapot") == "http_418"
    assert gateway_root("http://h:8000/v1/") == gateway_root("http://h:8000") == "http://h:8000"
