"""OpenAI Responses API (POST /v1/responses): Codex, Copilot's `responses` wire, the SDKs'
`responses.create` / `responses.stream`. Pure: no Django.

Translated, not forwarded: the request becomes an OpenAI chat request for the worker's
/v1/chat/completions, and the worker's answer (whole or streamed) becomes a Response object or
the Responses event sequence. Why not llama-server's own /v1/responses: the pinned build
refuses tool types other than `function` (Codex sends a `namespace` tool and hosted tools on its
first request), does not map `developer` items, custom (freeform) tools or reasoning items, and
would leave forced tool calls to a small model's goodwill; translating reuses the chat path's
forced-tool constraint and keeps one accounting of usage. See docs/clients.md.

Honest about state: the gateway stores no responses, so `previous_response_id` gets a 400 that
says to send the whole conversation, and every Response says `"store": false`. Hosted tools
(web search, file search, code interpreter, …) cannot run on a worker: they are left out and
the model answers without them, as it would with the tool unused.
"""
from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.errors import ApiError, invalid_request
from inference.protocols import openai_chat
from inference.protocols.base import Call, Chain, Plan, Protocol, StreamTransform, Target, chat_shape
from inference.sse import sse_events
from inference.validation import (
    MAX_TOKENS_LIMIT,
    check_optional_int,
    check_sampling,
    check_stream,
    parse_json_object,
    require_model,
)

WORKER_PATH = "/v1/chat/completions"
HOSTED_TOOL_TYPES = frozenset({
    "web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation",
    "computer_use_preview", "computer_use", "mcp", "local_shell", "shell", "apply_patch", "tool_search",
})
TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text", "summary_text", "refusal"})
# Request fields read by the translation; every other field is accepted and not forwarded.
MESSAGE_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


# --- request -------------------------------------------------------------------------------


def parse(raw: bytes) -> Call:
    body = parse_json_object(raw)
    model = require_model(body)
    if body.get("previous_response_id") is not None:
        raise invalid_request(
            "`previous_response_id` is not supported: this gateway stores no responses. Send the whole "
            "conversation in `input` (and `store: false`).", param="previous_response_id")
    if body.get("background") is True:
        raise invalid_request("`background` responses are not supported by this gateway; stream instead.",
                              param="background")
    if body.get("conversation") is not None:
        raise invalid_request("`conversation` is not supported: this gateway stores no conversations. Send the "
                              "whole conversation in `input`.", param="conversation")
    stream = check_stream(body)
    check_optional_int(body, "max_output_tokens", minimum=1, maximum=MAX_TOKENS_LIMIT)
    check_sampling(body)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid_request("`instructions` must be a string.", param="instructions")
    messages = to_chat_messages(body.get("input"), instructions)
    tools, custom = _tools(body.get("tools"))
    choice = _tool_choice(body.get("tool_choice"), tools)
    response_format = _text_format(body.get("text"))
    opening = tuple(messages[: next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), len(messages))])
    return Call(model=model, stream=stream, body=body, size=len(raw), max_tokens=body.get("max_output_tokens"),
                opening=opening, parsed=Translated(messages, tools, custom, choice, response_format),
                shape=chat_shape(messages, tools=body.get("tools")))


@dataclass(frozen=True)
class Translated:
    """A Responses request, worked out once by parse(): its chat messages and tools."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    custom: set[str]  # names of custom (freeform) tools: their calls go back as custom_tool_call
    tool_choice: Any
    response_format: dict[str, Any] | None


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_request(f"`{where}` must be a string or an array of content parts.", param=where)
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise invalid_request(f"`{where}[{index}]` must be a content part with a `type`.", param=f"{where}[{index}]")
        if part["type"] in TEXT_PART_TYPES:
            text = part.get("text", part.get("refusal", ""))
            if not isinstance(text, str):
                raise invalid_request(f"`{where}[{index}].text` must be a string.", param=f"{where}[{index}].text")
            texts.append(text)
        elif part["type"] in {"input_image", "input_file", "input_audio"}:
            raise invalid_request(f"`{where}[{index}]`: {part['type']} is not supported; the school's models read "
                                  "text only.", param=f"{where}[{index}]", code="unsupported_content")
    return "".join(texts)


def to_chat_messages(items: Any, instructions: str | None) -> list[dict[str, Any]]:
    """Responses `input` (a string, or items) as chat messages for the worker."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    if not isinstance(items, list) or not items:
        raise invalid_request("`input` must be a string or a non-empty array of input items.", param="input")
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise invalid_request(f"`{where}` must be an object.", param=where)
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            raise invalid_request(f"`{where}.type` must be a string.", param=f"{where}.type")
        if kind == "message":
            asked = item.get("role")
            role = MESSAGE_ROLES.get(asked) if isinstance(asked, str) else None
            if role is None:
                raise invalid_request(f"`{where}.role` must be user, assistant, system or developer; got "
                                      f"{str(item.get('role'))[:40]!r}.", param=f"{where}.role")
            text = _text(item.get("content", ""), f"{where}.content")
            if role == "assistant" and messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1] \
                    and not messages[-1].get("content"):
                messages[-1]["content"] = text
            else:
                messages.append({"role": role, "content": text})
        elif kind in {"function_call", "custom_tool_call"}:
            name, call_id = item.get("name"), item.get("call_id")
            arguments = item.get("arguments") if kind == "function_call" else json.dumps({"input": item.get("input", "")})
            if not isinstance(name, str) or not isinstance(call_id, str) or not isinstance(arguments, str):
                raise invalid_request(f"`{where}` needs string `name`, `call_id` and "
                                      f"{'`arguments`' if kind == 'function_call' else '`input`'}.", param=where)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            if messages and messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in {"function_call_output", "custom_tool_call_output"}:
            call_id, output = item.get("call_id"), item.get("output", "")
            if not isinstance(call_id, str):
                raise invalid_request(f"`{where}.call_id` must be a string.", param=f"{where}.call_id")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _text(output, f"{where}.output")})
        elif kind == "reasoning":
            continue  # the model's earlier thinking: not replayed to the worker
        elif kind == "item_reference":
            raise invalid_request(f"`{where}`: item references need stored responses, which this gateway does not "
                                  "keep. Send the items themselves.", param=where)
        else:
            raise invalid_request(f"`{where}`: input items of type {str(kind)[:40]!r} are not supported here.",
                                  param=f"{where}.type")
    if not any(m["role"] in {"user", "tool"} for m in messages):
        raise invalid_request("`input` holds no user message.", param="input")
    return messages


def _tools(tools: Any) -> tuple[list[dict[str, Any]], set[str]]:
    """Responses tools (flat) as chat tools (nested). Returns (tools, names of custom tools).
    Hosted tools are left out; a `namespace` groups function tools, which are kept."""
    if tools is None:
        return [], set()
    if not isinstance(tools, list):
        raise invalid_request("`tools` must be an array.", param="tools")
    chat_tools: list[dict[str, Any]] = []
    custom: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise invalid_request(f"`{where}` must be a tool object with a `type`.", param=where)
        kind = tool["type"]
        if kind == "namespace":
            inner, inner_custom = _tools(tool.get("tools") or [])
            chat_tools += inner
            custom |= inner_custom
            continue
        if kind in HOSTED_TOOL_TYPES or kind not in {"function", "custom"}:
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise invalid_request(f"`{where}.name` must be a non-empty string.", param=f"{where}.name")
        if kind == "custom":
            custom.add(name)
            parameters: Any = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
        else:
            parameters = tool.get("parameters") or {"type": "object", "properties": {}}
            if not isinstance(parameters, dict):
                raise invalid_request(f"`{where}.parameters` must be a JSON schema object.", param=f"{where}.parameters")
        description = tool.get("description") or ""
        chat_tools.append({"type": "function", "function": {
            "name": name, "description": description if isinstance(description, str) else "", "parameters": parameters}})
    return chat_tools, custom


def _tool_choice(choice: Any, tools: list[dict[str, Any]]) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    kind = choice.get("type") if isinstance(choice, dict) else None
    if not isinstance(kind, str):
        kind = None
    if isinstance(choice, dict) and kind in {"function", "custom"} and isinstance(choice.get("name"), str):
        if choice["name"] not in {t["function"]["name"] for t in tools}:
            raise invalid_request(f"`tool_choice` names `{choice['name'][:80]}`, which is not in `tools`.",
                                  param="tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}
    if isinstance(choice, dict) and kind == "allowed_tools":
        return choice.get("mode") if choice.get("mode") in ("auto", "required") else "auto"
    if isinstance(choice, dict) and kind in HOSTED_TOOL_TYPES:
        return "auto"
    raise invalid_request("`tool_choice` must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                          "\"name\": …}.", param="tool_choice")


def _text_format(text: Any) -> dict[str, Any] | None:
    """`text.format` as chat's `response_format` (json_schema is enforced by the worker's grammar)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise invalid_request("`text` must be an object.", param="text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        return {"type": "json_schema", "json_schema": {"name": str(fmt.get("name") or "output"), "schema": fmt["schema"]}}
    raise invalid_request("`text.format` must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                          "{\"type\": \"json_schema\", \"schema\": {…}}.", param="text.format")


def _translated(call: Call) -> Translated:
    assert isinstance(call.parsed, Translated), "a Responses call comes from responses.parse()"
    return call.parsed


def chat_body(call: Call, max_tokens: int) -> dict[str, Any]:
    """The chat request the worker gets. Built from the allow-listed fields only."""
    body, translated = call.body, _translated(call)
    chat: dict[str, Any] = {
        "model": call.model,
        "messages": translated.messages,
        "max_tokens": max_tokens,
        "stream": call.stream,
    }
    if call.stream:
        chat["stream_options"] = {"include_usage": True}
    if translated.tools:
        chat["tools"] = translated.tools
        if translated.tool_choice is not None:
            chat["tool_choice"] = translated.tool_choice
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if translated.response_format is not None:
        chat["response_format"] = translated.response_format
    return chat


# --- answer --------------------------------------------------------------------------------


def _envelope(call: Call, *, response_id: str, created_at: int, status: str, output: list[dict[str, Any]],
              usage: dict[str, Any] | None, incomplete: str | None = None) -> dict[str, Any]:
    body = call.body
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": call.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage,
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
    }


def _usage(chat_usage: dict[str, Any] | None) -> dict[str, Any]:
    chat_usage = chat_usage or {}
    prompt, completion = int(chat_usage.get("prompt_tokens") or 0), int(chat_usage.get("completion_tokens") or 0)
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, custom: set[str],
               status: str = "completed") -> dict[str, Any]:
    if name in custom:
        try:
            text = json.loads(arguments).get("input", "")
        except (ValueError, AttributeError):
            text = arguments
        return {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": name,
                "input": text if isinstance(text, str) else json.dumps(text), "status": status}
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def from_chat(call: Call, data: dict[str, Any]) -> dict[str, Any]:
    """A whole chat completion as a Response."""
    custom = _translated(call).custom
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append(_message_item(_id("msg"), message["content"]))
    for tool_call in message.get("tool_calls") or []:
        function = tool_call.get("function") or {}
        output.append(_call_item(_id("fc"), tool_call.get("id") or _id("call"), function.get("name", ""),
                                 function.get("arguments") or "{}", custom))
    incomplete = "max_output_tokens" if choice.get("finish_reason") == "length" else None
    return _envelope(call, response_id=_id("resp"), created_at=int(time.time()),
                     status="incomplete" if incomplete else "completed", output=output,
                     usage=_usage(data.get("usage")), incomplete=incomplete)


class StreamTranslator(StreamTransform):
    """The worker's chat chunks -> the Responses event sequence: response.created,
    response.in_progress, then per output item output_item.added, (content_part.added,
    output_text.delta*, output_text.done, content_part.done) or function_call_arguments.delta*
    / .done, output_item.done; finally response.completed (or response.incomplete) with usage.
    Every event carries a sequence_number. An error from the worker ends it with `error`."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.custom = _translated(call).custom
        self.response_id = _id("resp")
        self.created_at = int(time.time())
        self.sequence = 0
        self.pending = b""
        self.output: list[dict[str, Any]] = []
        self.text_item: dict[str, Any] | None = None  # the open message item, if any
        self.calls: dict[int, dict[str, Any]] = {}  # open function calls by the worker's tool-call index
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.started = False
        self.ended = False

    def _event(self, kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return f"event: {kind}\ndata: ".encode() + json.dumps(payload).encode() + b"\n\n"

    def _response(self, status: str, *, usage: dict[str, Any] | None = None,
                  incomplete: str | None = None) -> dict[str, Any]:
        return _envelope(self.call, response_id=self.response_id, created_at=self.created_at, status=status,
                         output=[item for item in self.output if item.get("status") == "completed"]
                         if status != "in_progress" else [], usage=usage, incomplete=incomplete)

    def _start(self) -> Iterator[bytes]:
        if not self.started:
            self.started = True
            yield self._event("response.created", response=self._response("in_progress"))
            yield self._event("response.in_progress", response=self._response("in_progress"))

    def feed(self, raw: bytes) -> Iterator[bytes]:
        yield from self._start()
        events, self.pending = sse_events(self.pending, raw)
        for event in events:
            if event.startswith(b":"):
                yield event + b"\n\n"  # keep-alive comments pass through
                continue
            data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if not data:
                continue
            if data == b"[DONE]":
                yield from self._finish()
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk and not chunk.get("choices"):
                yield from self._fail(chunk["error"])
                continue
            yield from self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> Iterator[bytes]:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield from self._text(delta["content"])
            for tool_call in delta.get("tool_calls") or []:
                yield from self._tool_delta(tool_call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]

    def _text(self, text: str) -> Iterator[bytes]:
        if self.text_item is None:
            item_id = _id("msg")
            self.text_item = {"type": "message", "id": item_id, "status": "in_progress", "role": "assistant",
                              "content": [], "_text": "", "_index": len(self.output)}
            self.output.append(self.text_item)
            yield self._event("response.output_item.added", output_index=self.text_item["_index"],
                              item={k: v for k, v in self.text_item.items() if not k.startswith("_")})
            yield self._event("response.content_part.added", item_id=item_id, output_index=self.text_item["_index"],
                              content_index=0, part={"type": "output_text", "text": "", "annotations": []})
        self.text_item["_text"] += text
        yield self._event("response.output_text.delta", item_id=self.text_item["id"],
                          output_index=self.text_item["_index"], content_index=0, delta=text, logprobs=[])

    def _close_text(self) -> Iterator[bytes]:
        item = self.text_item
        if item is None:
            return
        self.text_item = None
        text, index = item.pop("_text"), item.pop("_index")
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        yield self._event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                          text=text, logprobs=[])
        yield self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                          part=part)
        item.update(_message_item(item["id"], text))
        yield self._event("response.output_item.done", output_index=index, item=item)

    def _tool_delta(self, tool_call: dict[str, Any]) -> Iterator[bytes]:
        index = tool_call.get("index", 0)
        function = tool_call.get("function") or {}
        current = self.calls.get(index)
        if current is None:
            yield from self._close_text()
            current = {"id": _id("fc"), "call_id": tool_call.get("id") or _id("call"),
                       "name": function.get("name") or "", "arguments": "", "output_index": len(self.output)}
            self.calls[index] = current
            self.output.append({"status": "in_progress"})  # placeholder, filled when the call is done
            item = _call_item(current["id"], current["call_id"], current["name"], "", self.custom, "in_progress")
            yield self._event("response.output_item.added", output_index=current["output_index"], item=item)
        if function.get("arguments"):
            current["arguments"] += function["arguments"]
            if current["name"] not in self.custom:
                yield self._event("response.function_call_arguments.delta", item_id=current["id"],
                                  output_index=current["output_index"], delta=function["arguments"])

    def _close_calls(self) -> Iterator[bytes]:
        for current in self.calls.values():
            item = _call_item(current["id"], current["call_id"], current["name"], current["arguments"] or "{}",
                              self.custom)
            if item["type"] == "function_call":
                yield self._event("response.function_call_arguments.done", item_id=current["id"],
                                  output_index=current["output_index"], arguments=item["arguments"])
            else:
                yield self._event("response.custom_tool_call_input.done", item_id=current["id"],
                                  output_index=current["output_index"], input=item["input"])
            self.output[current["output_index"]] = item
            yield self._event("response.output_item.done", output_index=current["output_index"], item=item)
        self.calls = {}

    def end(self) -> Iterator[bytes]:
        yield from self._start()
        yield from self._finish()  # the worker's stream ended without [DONE]: close it all the same

    def _finish(self) -> Iterator[bytes]:
        if self.ended:
            return
        self.ended = True
        yield from self._close_text()
        yield from self._close_calls()
        incomplete = "max_output_tokens" if self.finish_reason == "length" else None
        response = self._response("incomplete" if incomplete else "completed", usage=_usage(self.usage),
                                  incomplete=incomplete)
        yield self._event("response.incomplete" if incomplete else "response.completed", response=response)

    def _fail(self, error: Any) -> Iterator[bytes]:
        if self.ended:
            return
        self.ended = True
        error = error if isinstance(error, dict) else {"message": str(error)}
        message = str(error.get("message") or "The worker failed.")
        code = str(error.get("code") or "server_error")
        yield self._event("error", code=code, message=message, param=None)
        failed = self._response("failed")
        failed["error"] = {"code": code, "message": message}
        yield self._event("response.failed", response=failed)


def plan(call: Call, target: Target) -> Plan:
    chat = chat_body(call, target.max_tokens)
    chat_call = Call(model=call.model, stream=call.stream, body=chat, size=call.size, max_tokens=target.max_tokens)
    inner = openai_chat.plan(chat_call, Target(max_tokens=target.max_tokens))  # forced tool calls: the chat path's constraint
    inner_transform = inner.stream_transform
    inner_convert = inner.convert

    def convert(data: dict[str, Any]) -> dict[str, Any]:
        return from_chat(call, inner_convert(data) if inner_convert else data)

    def transform() -> StreamTransform:
        translator = StreamTranslator(call)
        return Chain(inner_transform(), translator) if inner_transform else translator

    return Plan(path=WORKER_PATH, body=inner.body, convert=convert, stream_transform=transform)


def error_event(error: ApiError) -> bytes:
    payload = {"type": "error", "code": error.code or error.type, "message": error.message, "param": error.param,
               "sequence_number": 0}
    return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"


PROTOCOL = Protocol(
    client="responses",
    keepalive=b": waiting for a free worker\n\n",
    parse=parse,
    plan=plan,
    error_status=openai_chat.error_status,
    error_body=openai_chat.error_body,
    error_event=error_event,
)
