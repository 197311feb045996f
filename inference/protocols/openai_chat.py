"""OpenAI chat completions (POST /v1/chat/completions, and Copilot's Ollama route). Pure: no Django.

Forwarded to the worker's own /v1/chat/completions, but only the fields on the allow-list: a
worker's native knobs (n_predict, id_slot, cache_prompt, samplers, grammar, lora, n_probs, …)
would let a student step around the output cap and the token budget, or probe another
student's cached prompt, so they never reach it. The output cap is always the gateway's
(`max_tokens`). Forced tool calls and reasoning models are rewritten (inference/forced_tools.py,
inference/reasoning.py); every other answer passes through untouched.
"""
from __future__ import annotations

from typing import Any

from core.errors import ApiError, invalid_request
from inference.forced_tools import StreamConverter, convert_response, plan_forced_tool, rewrite_request
from inference.protocols.base import Call, Plan, Protocol, Target, chat_shape
from inference.protocols.ollama import error_body as ollama_error_body
from inference.reasoning import ReasoningMirror, mirror_reasoning
from inference.validation import (
    MAX_TOKENS_LIMIT,
    check_optional_int,
    check_optional_number,
    check_sampling,
    check_stream,
    parse_json_object,
    require_model,
)

WORKER_PATH = "/v1/chat/completions"
CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
# Forwarded as the client sent them (after the checks below); max_tokens is set by the gateway.
# One llama-server knob is kept: ignore_eos (generate exactly max_tokens, for benchmarks), which
# stays within the gateway's output cap and the request's token reservation.
FORWARDED = ("model", "messages", "stream", "stream_options", "temperature", "top_p", "stop", "presence_penalty",
             "frequency_penalty", "seed", "tools", "tool_choice", "parallel_tool_calls", "response_format",
             "logprobs", "top_logprobs", "ignore_eos")


def _check_messages(messages: Any) -> None:
    if messages is None:
        raise invalid_request("Missing required parameter: 'messages'.", param="messages")
    if not isinstance(messages, list):
        raise invalid_request("`messages` must be an array of message objects.", param="messages")
    if not messages:
        raise invalid_request("`messages` must contain at least one message.", param="messages")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise invalid_request(f"`{where}` must be an object with `role` and `content`.", param=where)
        role = message.get("role")
        if not isinstance(role, str) or role not in CHAT_ROLES:
            raise invalid_request(f"`{where}.role` must be one of {', '.join(sorted(CHAT_ROLES))}; got "
                                  f"{str(role)[:40]!r}.", param=f"{where}.role")
        content = message.get("content")
        if content is None:
            if role != "assistant":
                raise invalid_request(f"`{where}.content` is required for role {role}.", param=f"{where}.content")
        elif isinstance(content, list):
            for part_index, part in enumerate(content):
                part_where = f"{where}.content[{part_index}]"
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise invalid_request(f"`{part_where}` must be a content part with a `type`.", param=part_where)
                if part["type"] not in TEXT_PARTS:
                    raise invalid_request(f"`{part_where}`: {part['type'][:40]} parts are not supported; the school's "
                                          "models read text only.", param=part_where, code="unsupported_content")
                if not isinstance(part.get("text"), str):
                    raise invalid_request(f"`{part_where}.text` must be a string.", param=f"{part_where}.text")
        elif not isinstance(content, str):
            raise invalid_request(f"`{where}.content` must be a string or an array of parts.", param=f"{where}.content")
        calls = message.get("tool_calls")
        if calls is not None and (not isinstance(calls, list) or not all(
                isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls)):
            raise invalid_request(f"`{where}.tool_calls` must be an array of {{\"function\": {{…}}}} objects.",
                                  param=f"{where}.tool_calls")


def check_shared_options(body: dict[str, Any]) -> None:
    """The options chat and completions share: sampling, n, seed, penalties, stop, stream_options."""
    check_sampling(body)
    check_optional_int(body, "n", minimum=1, maximum=1)
    check_optional_int(body, "seed", minimum=-(2**63), maximum=2**64 - 1)
    check_optional_number(body, "presence_penalty", minimum=-2, maximum=2)
    check_optional_number(body, "frequency_penalty", minimum=-2, maximum=2)
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise invalid_request("`stream_options` must be an object.", param="stream_options")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop)):
        raise invalid_request("`stop` must be a string or an array of up to 4 strings.", param="stop")
    if body.get("ignore_eos") is not None and not isinstance(body["ignore_eos"], bool):
        raise invalid_request("`ignore_eos` must be true or false.", param="ignore_eos")


def _check_options(body: dict[str, Any]) -> None:
    check_shared_options(body)
    check_optional_int(body, "max_completion_tokens", minimum=1, maximum=MAX_TOKENS_LIMIT)
    check_optional_int(body, "top_logprobs", minimum=0, maximum=20)
    for name, kind in (("response_format", dict), ("logprobs", bool), ("parallel_tool_calls", bool)):
        if body.get(name) is not None and not isinstance(body[name], kind):
            raise invalid_request(f"`{name}` must be {'an object' if kind is dict else 'true or false'}.", param=name)


def parse(raw: bytes) -> Call:
    body = parse_json_object(raw)
    model = require_model(body)
    _check_messages(body.get("messages"))
    stream = check_stream(body)
    _check_options(body)
    plan_forced_tool(body)  # checks tools and tool_choice
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    messages = body["messages"]
    opening = tuple(messages[: next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), len(messages))])
    return Call(model=model, stream=stream, body=body, size=len(raw), max_tokens=requested, opening=opening,
                shape=chat_shape(messages, tools=body.get("tools")))


def worker_body(call: Call, max_tokens: int) -> dict[str, Any]:
    body = {name: call.body[name] for name in FORWARDED if call.body.get(name) is not None}
    body["model"] = call.model
    body["max_tokens"] = max_tokens
    return body


def plan(call: Call, target: Target) -> Plan:
    body = worker_body(call, target.max_tokens)
    forced = plan_forced_tool(body)
    if forced is not None:
        return Plan(path=WORKER_PATH, body=rewrite_request(body, forced),
                    convert=lambda data: convert_response(data, forced),
                    stream_transform=lambda: StreamConverter(forced))
    if target.reasoning:
        return Plan(path=WORKER_PATH, body=body, convert=mirror_reasoning, stream_transform=ReasoningMirror)
    return Plan(path=WORKER_PATH, body=body)


def error_status(error: ApiError) -> int:
    return error.status


def error_body(error: ApiError) -> bytes:
    return error.openai_json()


def error_event(error: ApiError) -> bytes:
    return b"data: " + error.openai_json() + b"\n\ndata: [DONE]\n\n"


KEEPALIVE = b": waiting for a free worker\n\n"

PROTOCOL = Protocol(client="openai", keepalive=KEEPALIVE, parse=parse, plan=plan, error_status=error_status,
                    error_body=error_body, error_event=error_event)
# Copilot's Ollama discovery (/ollama/<key>/api/…): Ollama's own error envelope.
OLLAMA_API = Protocol(client="ollama", keepalive=KEEPALIVE, parse=parse, plan=plan, error_status=error_status,
                      error_body=ollama_error_body, error_event=error_event)
OLLAMA_CHAT = Protocol(client="ollama", keepalive=KEEPALIVE, parse=parse, plan=plan, error_status=error_status,
                       error_body=error_body, error_event=error_event)
