"""Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens) for Claude Code, the
anthropic SDK and Copilot's `anthropic` wire. Pure: no Django.

Accept what Anthropic's API accepts. The gateway checks what it must (model, max_tokens, the
shape of messages and blocks, tools) and maps the rest:
- `system`-role messages inside `messages` (Claude Code's beta mid-conversation-system) are
  accepted and stay where they are, as system messages of the chat request (the worker's chat
  template reads them where they stand, as its native route did);
- `thinking`, `context_management`, `output_config`, `metadata`, `service_tier`, `container`,
  `mcp_servers`, `cache_control` on blocks and tools, and unknown fields and betas are accepted
  and not forwarded: the school's models do not think aloud, and prompt caching is the
  worker's own (cache_prompt);
- server tools (web search, code execution, …) cannot run on a worker: left out;
- thinking blocks of earlier turns are dropped; images and documents get a clear 400 (the
  models read text only).

Every request is translated to the worker's OpenAI chat route and its answer back
(`to_openai`, `from_openai`, `StreamTranslator`): the pinned llama-server's native /v1/messages
ignores `id_slot` and `cache_prompt`, so on it a request could not be kept to its student's own
slot and a classmate's cached prompt would show (docs/classroom.md). A forced tool (`tool_choice`
tool/any) is also constrained by inference/forced_tools.py. Whatever the worker sends, the
client gets a valid event sequence (message_start first, every block opened and closed, then
message_delta and message_stop).
"""
from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

from core.errors import ApiError, invalid_request
from inference.forced_tools import StreamConverter, convert_response, plan_forced_tool, rewrite_request
from inference.protocols.base import Call, Chain, Plan, Protocol, StreamTransform, Target, chat_shape
from inference.sse import sse_events
from inference.validation import (
    MAX_TOKENS_LIMIT,
    check_optional_int,
    check_optional_number,
    check_stream,
    parse_json_object,
    require_model,
)

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
CHAT_PATH = "/v1/chat/completions"
ROLES = frozenset({"user", "assistant", "system"})
TOOL_CHOICES = frozenset({"auto", "any", "tool", "none"})
DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result",
                            "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result", "container_upload"})
MEDIA_BLOCKS = frozenset({"image", "document", "search_result"})

# Anthropic's error types by HTTP status (their API reference).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    529: "overloaded_error",
}


# --- request -------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or []
                   if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str))


def _clean_blocks(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A message's content with every block checked and cleaned for the worker."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_request(f"{where}.content: must be a string or an array of blocks")
    blocks: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        block_where = f"{where}.content.{index}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise invalid_request(f"{block_where}: every block needs a string `type`")
        kind = block["type"]
        if kind in DROPPED_BLOCKS:
            continue
        if kind in MEDIA_BLOCKS:
            raise invalid_request(f"{block_where}: {kind} blocks are not supported; the school's models read text only")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise invalid_request(f"{block_where}.text: must be a string")
            blocks.append({"type": "text", "text": block["text"]})
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) \
                    or not isinstance(block.get("input", {}), dict):
                raise invalid_request(f"{block_where}: tool_use needs string `id` and `name` and an object `input`")
            blocks.append({"type": "tool_use", "id": block["id"], "name": block["name"], "input": block.get("input", {})})
        elif kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise invalid_request(f"{block_where}.tool_use_id: must be a string")
            inner = block.get("content", "")
            if not isinstance(inner, (str, list)):
                raise invalid_request(f"{block_where}.content: must be a string or an array of blocks")
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block["tool_use_id"],
                                      "content": inner if isinstance(inner, str) else _text_of(inner)}
            if block.get("is_error") is True:
                result["is_error"] = True
            blocks.append(result)
        else:
            raise invalid_request(f"{block_where}: blocks of type {kind[:40]!r} are not supported")
    return blocks


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list) or not all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in system):
        raise invalid_request("system: must be a string or an array of text blocks")


# Claude Code's first system block: `x-anthropic-billing-header: cc_version=<version>.<3 hex>; ...`,
# the hex a hash of the task's first user message. Billing metadata for Anthropic's API, not an
# instruction: left in, it makes every task's prompt differ from its 40th character, so no cache
# (the student's own slot, the class's shared prefix) could hold it across tasks.
BILLING_HEADER = "x-anthropic-billing-header:"


def _system_text(system: Any) -> str:
    """The system prompt for the worker: its text blocks, without Claude Code's billing header."""
    if isinstance(system, list):
        system = [block for block in system if not (isinstance(block, dict) and isinstance(block.get("text"), str)
                                                    and block["text"].startswith(BILLING_HEADER))]
    return _text_of(system)


def worker_messages(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, messages) for the worker: blocks cleaned, messages left empty by dropped
    blocks removed. `system`-role messages stay where the client put them: the worker's native
    route takes them there (tested with the pinned build), and moving them would change the
    prompt the model reads."""
    system = _system_text(body.get("system")) if body.get("system") else ""
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(body["messages"]):
        content = _clean_blocks(message.get("content"), f"messages.{index}")
        if isinstance(content, list) and not content:
            continue
        if message["role"] == "system":
            content = _text_of(content)
        messages.append({"role": message["role"], "content": content})
    return system, messages


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise invalid_request("messages: must be a non-empty array")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid_request(f"messages.{index}: must be an object with role and content")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise invalid_request(f"messages.{index}.role: must be 'user', 'assistant' or 'system'")
        _clean_blocks(message.get("content"), f"messages.{index}")


def _tools(tools: Any) -> list[dict[str, Any]]:
    """Client tools, cleaned; server tools (a `type` and no input_schema) are left out."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid_request("tools: must be an array of {name, description, input_schema}")
    cleaned = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
            raise invalid_request(f"tools.{index}: every tool needs a non-empty string `name`")
        if tool.get("type") not in (None, "custom") and "input_schema" not in tool:
            continue  # a server tool
        schema = tool.get("input_schema", {"type": "object"})
        if not isinstance(schema, dict):
            raise invalid_request(f"tools.{index}.input_schema: must be a JSON schema object")
        description = tool.get("description", "")
        cleaned.append({"name": tool["name"], "description": description if isinstance(description, str) else "",
                        "input_schema": schema})
    return cleaned


def _tool_choice(choice: Any, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    if choice is None:
        return None
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str) or choice["type"] not in TOOL_CHOICES:
        raise invalid_request("tool_choice: type must be auto, any, tool or none")
    if choice["type"] == "tool":
        if not isinstance(choice.get("name"), str) or choice["name"] not in {t["name"] for t in tools}:
            raise invalid_request(f"tool_choice: tool {str(choice.get('name'))[:80]!r} is not in tools")
        return {"type": "tool", "name": choice["name"]}
    return {"type": choice["type"]}


def _check_common(body: dict[str, Any]) -> str:
    model = require_model(body)
    _check_messages(body.get("messages"))
    _check_system(body.get("system"))
    tools = _tools(body.get("tools"))
    _tool_choice(body.get("tool_choice"), tools)
    return model


def parse(raw: bytes) -> Call:
    body = parse_json_object(raw)
    model = _check_common(body)
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise invalid_request(f"max_tokens: required, an integer from 1 to {MAX_TOKENS_LIMIT}")
    stream = check_stream(body)
    check_optional_number(body, "temperature", minimum=0, maximum=1)
    check_optional_number(body, "top_p", minimum=0, maximum=1)
    check_optional_int(body, "top_k", minimum=0, maximum=1_000_000)
    stops = body.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) for s in stops)):
        raise invalid_request("stop_sequences: must be an array of strings")
    system, messages = worker_messages(body)
    opening = (system, *messages[:1])
    return Call(model=model, stream=stream, body=body, size=len(raw), max_tokens=max_tokens, opening=opening,
                shape=chat_shape(messages, tools=body.get("tools"), system=system))


def parse_count_tokens(raw: bytes) -> Call:
    body = parse_json_object(raw)
    model = _check_common(body)
    return Call(model=model, stream=False, body=body, size=len(raw))


def native_body(call: Call, *, max_tokens: int | None) -> dict[str, Any]:
    """The allow-listed, cleaned Messages request (the worker's native route's shape: what
    count_tokens sends, and what to_openai translates)."""
    body = call.body
    system, messages = worker_messages(body)
    native: dict[str, Any] = {"model": call.model, "messages": messages}
    if max_tokens is not None:
        native["max_tokens"] = max_tokens
        native["stream"] = call.stream
    if system:
        native["system"] = system
    tools = _tools(body.get("tools"))
    if tools:
        native["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"), tools)
        if choice is not None:
            native["tool_choice"] = choice
    for name in ("temperature", "top_p", "top_k", "stop_sequences"):
        if body.get(name) is not None:
            native[name] = body[name]
    return native


def forces_tool(body: dict[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return isinstance(choice, dict) and choice.get("type") in {"tool", "any"} and bool(body.get("tools"))


def plan(call: Call, target: Target) -> Plan:
    """Every Messages request goes to the worker's OpenAI chat route, translated both ways: the
    pinned llama-server's native /v1/messages ignores `id_slot` and `cache_prompt`, so it could
    not be kept to the student's own slot, and a classmate's cached prefix would speed up (and
    show in the counts of) a guess (docs/classroom.md). A forced tool is also constrained."""
    native = native_body(call, max_tokens=target.max_tokens)
    chat = to_openai(native)
    if not forces_tool(native):
        return Plan(path=CHAT_PATH, body=chat, convert=lambda data: from_openai(data, model=call.model),
                    stream_transform=lambda: StreamTranslator(model=call.model))
    forced = plan_forced_tool(chat)
    assert forced is not None  # forces_tool() said a tool is forced
    return Plan(
        path=CHAT_PATH, body=rewrite_request(chat, forced),
        convert=lambda data: from_openai(convert_response(data, forced), model=call.model),
        stream_transform=lambda: Chain(StreamConverter(forced), StreamTranslator(model=call.model)),
    )


def plan_count_tokens(call: Call, target: Target) -> Plan:
    return Plan(path=COUNT_TOKENS_PATH, body=native_body(call, max_tokens=None))


# --- translation to and from the worker's chat route --------------------------------------------


def to_openai(native: dict[str, Any]) -> dict[str, Any]:
    """A (cleaned) Messages request as an OpenAI chat request: tools, tool use and results too;
    `system`-role messages stay where the client put them."""
    messages: list[dict[str, Any]] = []
    if native.get("system"):
        messages.append({"role": "system", "content": native["system"]})
    for message in native["messages"]:
        content = message["content"]
        if isinstance(content, str):
            messages.append({"role": message["role"], "content": content})
            continue
        text = _text_of(content)
        if message["role"] == "assistant":
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
                     for b in content if b["type"] == "tool_use"]
            messages.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
            continue
        for block in content:
            if block["type"] == "tool_result":
                messages.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": block["content"]})
        if text:
            messages.append({"role": "user", "content": text})
    choice = native.get("tool_choice") or {}
    tool_choice: Any = "auto"
    if choice.get("type") == "tool":
        tool_choice = {"type": "function", "function": {"name": choice["name"]}}
    elif choice.get("type") == "any":
        tool_choice = "required"
    elif choice.get("type") == "none":
        tool_choice = "none"
    translated: dict[str, Any] = {
        "model": native["model"],
        "messages": messages,
        "max_tokens": native["max_tokens"],
        "stream": native.get("stream", False),
    }
    if native.get("tools"):
        translated["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                                 "parameters": t["input_schema"]}}
                               for t in native["tools"]]
        translated["tool_choice"] = tool_choice
    for source, target in [("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"),
                           ("stop_sequences", "stop")]:
        if native.get(source) is not None:
            translated[target] = native[source]
    if translated["stream"]:
        translated["stream_options"] = {"include_usage": True}
    return translated


STOP_REASONS = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}


def tool_use_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def message_id() -> str:
    return "msg_" + secrets.token_hex(12)


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
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"),
        "stop_sequence": None,
        "usage": anthropic_usage(usage),
    }


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + json.dumps(data).encode() + b"\n\n"


def _message_start(model: str) -> bytes:
    return event("message_start", {"type": "message_start", "message": {
        "id": message_id(), "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}})


class StreamTranslator(StreamTransform):
    """The worker's OpenAI chat chunks -> the Anthropic event sequence: message_start, then per
    content block (text, or tool_use for each tool call) content_block_start,
    content_block_delta* (text_delta, input_json_delta), content_block_stop; then message_delta
    (stop_reason, usage) and message_stop. An error from the worker becomes an `error` event."""

    def __init__(self, *, model: str) -> None:
        self.model = model
        self._pending = b""
        self._block: tuple[str, int] | None = None  # ("text", -1) or ("tool", worker's call index)
        self._blocks = 0
        self._stop_reason = "end_turn"
        self._started = False
        self._finished = False

    def feed(self, raw: bytes) -> Iterator[bytes]:
        events, self._pending = sse_events(self._pending, raw)
        for item in events:
            yield from self._translate(item)

    def end(self) -> Iterator[bytes]:
        if not self._finished:
            yield from self._start()
            yield from self._finish(usage={})

    def _start(self) -> Iterator[bytes]:
        if not self._started:
            self._started = True
            yield _message_start(self.model)

    def _translate(self, item: bytes) -> Iterator[bytes]:
        if not item.startswith(b"data: ") or self._finished:
            return
        if item == b"data: [DONE]":
            yield from self.end()  # no usage chunk came: close the message anyway
            return
        try:
            chunk = json.loads(item[6:])
        except ValueError:
            return
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            self._finished = True
            message = chunk["error"].get("message", "") if isinstance(chunk["error"], dict) else str(chunk["error"])
            yield event("error", {"type": "error", "error": {"type": "api_error", "message": message}})
            return
        yield from self._start()
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                yield from self._open(("text", -1), {"type": "text", "text": ""})
                yield event("content_block_delta", {"type": "content_block_delta", "index": self._blocks - 1,
                                                     "delta": {"type": "text_delta", "text": delta["content"]}})
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                yield from self._open(("tool", int(call.get("index") or 0)), {
                    "type": "tool_use", "id": tool_use_id(), "name": function.get("name", ""), "input": {}})
                if function.get("arguments"):
                    yield event("content_block_delta", {"type": "content_block_delta", "index": self._blocks - 1,
                                                         "delta": {"type": "input_json_delta",
                                                                   "partial_json": function["arguments"]}})
            if choice.get("finish_reason"):
                self._stop_reason = STOP_REASONS.get(choice["finish_reason"], "end_turn")
        if chunk.get("usage"):
            yield from self._finish(usage=chunk["usage"])

    def _open(self, block: tuple[str, int], content_block: dict[str, Any]) -> Iterator[bytes]:
        if self._block == block:
            return
        yield from self._close()
        self._block = block
        self._blocks += 1
        yield event("content_block_start", {"type": "content_block_start", "index": self._blocks - 1,
                                            "content_block": content_block})

    def _close(self) -> Iterator[bytes]:
        if self._block is not None:
            self._block = None
            yield event("content_block_stop", {"type": "content_block_stop", "index": self._blocks - 1})

    def _finish(self, *, usage: dict[str, Any]) -> Iterator[bytes]:
        self._finished = True
        yield from self._close()
        yield event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": self._stop_reason, "stop_sequence": None},
                                      "usage": anthropic_usage(usage)})
        yield event("message_stop", {"type": "message_stop"})


def anthropic_usage(usage: dict[str, Any]) -> dict[str, int]:
    """OpenAI usage as Anthropic's: input_tokens leaves out what came from the cache. The cache
    counts are the student's own (the chat route is pinned to a slot: inference/admission/slot_owners.py)."""
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {"input_tokens": max(0, prompt - cached), "cache_read_input_tokens": cached,
            "output_tokens": int(usage.get("completion_tokens") or 0)}


# --- errors --------------------------------------------------------------------------------


def error_status(error: ApiError) -> int:
    """503 "no worker can serve" is Anthropic's 529 overloaded, which Claude Code retries."""
    return 529 if error.status == 503 else error.status


# Claude Code (2.1.197) compacts the conversation and retries when a refusal's message contains
# Anthropic's own words for an overflow; any other wording ends the session in the error.
PROMPT_TOO_LONG = "Prompt is too long."


def error_payload(error: ApiError) -> dict[str, object]:
    """Anthropic's envelope. Its clients show `error.message` and ignore other fields: a student
    refusal's message starts with its code (`class_paused: …`); `code` is there for scripts. An
    overflow also says PROMPT_TOO_LONG, so Claude Code compacts instead of stopping."""
    status = error_status(error)
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = error.labelled_message()
    if error.code == "context_length_exceeded":
        message = f"{error.code}: {PROMPT_TOO_LONG} {error.message}"
    inner: dict[str, object] = {"type": kind, "message": message}
    if error.code:
        inner["code"] = error.code
    return {"type": "error", "error": inner}


def error_body(error: ApiError) -> bytes:
    return json.dumps(error_payload(error)).encode()


def error_event(error: ApiError) -> bytes:
    return b"event: error\ndata: " + error_body(error) + b"\n\n"


KEEPALIVE = b'event: ping\ndata: {"type": "ping"}\n\n'

PROTOCOL = Protocol(client="anthropic", keepalive=KEEPALIVE, parse=parse, plan=plan, error_status=error_status,
                    error_body=error_body, error_event=error_event, maps_unknown_models=True)
COUNT_TOKENS = Protocol(client="anthropic", keepalive=KEEPALIVE, parse=parse_count_tokens, plan=plan_count_tokens,
                        error_status=error_status, error_body=error_body, error_event=error_event,
                        maps_unknown_models=True)
