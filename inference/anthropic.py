"""Anthropic Messages: validation, and translation to and from OpenAI chat for forced tool use.
Pure: no Django.

Plain requests go to llama-server's native /v1/messages (tested: text, streaming and
count_tokens work with the pinned build). A forced tool (`tool_choice` {"type": "tool"} or
{"type": "any"}) cannot be forced there, so such a request is translated into an OpenAI chat
request, forced by inference.forced_tools, and the answer translated back into a `tool_use`
block (streamed as input_json_delta events).
"""
from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

from inference.errors import invalid_request
from inference.validation import MAX_TOKENS_LIMIT, ParsedRequest, parse_json_object

ROLES = {"user", "assistant"}


def validate_messages(raw: bytes) -> ParsedRequest:
    body = parse_json_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_request("model: Field required (a non-empty string)", param="model")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise invalid_request(f"max_tokens: required, an integer from 1 to {MAX_TOKENS_LIMIT}", param="max_tokens")
    _check_messages(body.get("messages"))
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise invalid_request("system: must be a string or an array of text blocks", param="system")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid_request("stream: must be true or false", param="stream")
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools)):
        raise invalid_request("tools: must be an array of {name, description, input_schema}", param="tools")
    choice = body.get("tool_choice")
    if choice is not None and (not isinstance(choice, dict) or choice.get("type") not in {"auto", "any", "tool", "none"}):
        raise invalid_request("tool_choice: type must be auto, any, tool or none", param="tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool":
        names = {t["name"] for t in tools or []}
        if choice.get("name") not in names:
            raise invalid_request(f"tool_choice: tool {choice.get('name')!r} is not in tools", param="tool_choice")
    return ParsedRequest(model=model, stream=stream, body=body, size=len(raw))


def validate_count_tokens(raw: bytes) -> ParsedRequest:
    body = parse_json_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_request("model: Field required (a non-empty string)", param="model")
    _check_messages(body.get("messages"))
    return ParsedRequest(model=model, stream=False, body=body, size=len(raw))


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise invalid_request("messages: must be a non-empty array", param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise invalid_request(f"messages.{index}.role: must be 'user' or 'assistant'", param=f"messages.{index}")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise invalid_request(f"messages.{index}.content: must be a string or an array of blocks",
                                  param=f"messages.{index}.content")
        if isinstance(content, list) and not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content):
            raise invalid_request(f"messages.{index}.content: every block needs a type",
                                  param=f"messages.{index}.content")


def forces_tool(body: dict[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return isinstance(choice, dict) and choice.get("type") in {"tool", "any"} and bool(body.get("tools"))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or [] if block.get("type") == "text")


def to_openai(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request as an OpenAI chat request (tools, tool use and results too)."""
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _text(body["system"])})
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            messages.append({"role": message["role"], "content": content})
            continue
        text = _text(content)
        if message["role"] == "assistant":
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
                     for b in content if b["type"] == "tool_use"]
            messages.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
            continue
        for block in content:
            if block["type"] == "tool_result":
                messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id", ""),
                                 "content": _text(block.get("content", ""))})
        if text:
            messages.append({"role": "user", "content": text})
    choice = body.get("tool_choice") or {}
    tool_choice: Any = "auto"
    if choice.get("type") == "tool":
        tool_choice = {"type": "function", "function": {"name": choice["name"]}}
    elif choice.get("type") == "any":
        tool_choice = "required"
    translated: dict[str, Any] = {
        "model": body["model"],
        "messages": messages,
        "max_tokens": body["max_tokens"],
        "stream": body.get("stream", False),
        "tools": [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                    "parameters": t.get("input_schema") or {"type": "object"}}}
                  for t in body.get("tools") or []],
        "tool_choice": tool_choice,
    }
    for source, target in [("temperature", "temperature"), ("top_p", "top_p"), ("stop_sequences", "stop")]:
        if body.get(source) is not None:
            translated[target] = body[source]
    if translated["stream"]:
        translated["stream_options"] = {"include_usage": True}
    return translated


STOP_REASONS = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}


def tool_use_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def from_openai(data: dict[str, Any], *, model: str) -> dict[str, Any]:
    """An OpenAI chat completion (with tool_calls) as an Anthropic message."""
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        try:
            arguments = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            arguments = {}
        content.append({"type": "tool_use", "id": tool_use_id(), "name": call["function"]["name"], "input": arguments})
    usage = data.get("usage") or {}
    return {
        "id": "msg_" + secrets.token_hex(12),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0)},
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + json.dumps(data).encode() + b"\n\n"


class StreamTranslator:
    """OpenAI chunks (tool-call deltas from forced_tools.StreamConverter) -> Anthropic events."""

    def __init__(self, *, model: str) -> None:
        self.model = model
        self._pending = b""
        self._block_open = False
        self._stop_reason = "end_turn"
        self._started = False
        self._finished = False

    def feed(self, raw: bytes) -> Iterator[bytes]:
        self._pending += raw
        while b"\n\n" in self._pending:
            event, self._pending = self._pending.split(b"\n\n", 1)
            yield from self._translate(event)

    def _translate(self, event: bytes) -> Iterator[bytes]:
        if not event.startswith(b"data: "):
            return
        if event == b"data: [DONE]":
            if not self._finished:  # no usage chunk came: close the message anyway
                yield from self._finish(output_tokens=0)
            return
        chunk = json.loads(event[6:])
        if "error" in chunk:
            yield _event("error", {"type": "error", "error": {"type": "api_error",
                                                              "message": chunk["error"].get("message", "")}})
            return
        if not self._started:
            self._started = True
            yield _event("message_start", {"type": "message_start", "message": {
                "id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0}}})
        for choice in chunk.get("choices") or []:
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                function = call.get("function") or {}
                if not self._block_open:
                    self._block_open = True
                    yield _event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                        "type": "tool_use", "id": tool_use_id(), "name": function.get("name", ""), "input": {}}})
                if function.get("arguments"):
                    yield _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                        "type": "input_json_delta", "partial_json": function["arguments"]}})
            if choice.get("finish_reason"):
                self._stop_reason = STOP_REASONS.get(choice["finish_reason"], "end_turn")
        if chunk.get("usage"):
            yield from self._finish(output_tokens=chunk["usage"].get("completion_tokens", 0))

    def _finish(self, *, output_tokens: int) -> Iterator[bytes]:
        self._finished = True
        if self._block_open:
            yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield _event("message_delta", {"type": "message_delta",
                                       "delta": {"stop_reason": self._stop_reason, "stop_sequence": None},
                                       "usage": {"output_tokens": output_tokens}})
        yield _event("message_stop", {"type": "message_stop"})
