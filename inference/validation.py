"""Validation of request bodies before anything reaches a worker. Pure: no Django.

The body is forwarded to llama-server as the client sent it (plus the gateway's own fields),
so validation checks what must hold for the gateway to route and account the request, and
rejects what would make a worker fail with an unhelpful error.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from inference.errors import invalid_request

CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
MAX_TOKENS_LIMIT = 1_000_000


@dataclass(frozen=True)
class ParsedRequest:
    """A request body that passed validation, with what the gateway routes on."""

    model: str
    stream: bool
    body: dict[str, Any]
    size: int = 0  # bytes of the raw body: bounds the prompt's tokens (quota reservation)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise invalid_request("The request body is empty; send a JSON object.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_request("The request body is not valid UTF-8.") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid_request(f"The request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}.") from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    return body


def _require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise invalid_request("you must provide a model parameter", param="model")
    if not isinstance(model, str) or not model.strip():
        raise invalid_request("`model` must be a non-empty string.", param="model")
    return model


def _check_optional_int(body: dict[str, Any], name: str, *, minimum: int, maximum: int) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_request(f"`{name}` must be an integer.", param=name)
    if not minimum <= value <= maximum:
        raise invalid_request(f"`{name}` must be between {minimum} and {maximum}, got {value}.", param=name)


def _check_optional_number(body: dict[str, Any], name: str, *, minimum: float, maximum: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid_request(f"`{name}` must be a number.", param=name)
    if not minimum <= value <= maximum:
        raise invalid_request(f"`{name}` must be between {minimum} and {maximum}, got {value}.", param=name)


def _check_stream(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise invalid_request("`stream` must be true or false.", param="stream")
    return stream


def validate_chat(raw: bytes) -> ParsedRequest:
    body = parse_json_object(raw)
    model = _require_model(body)
    messages = body.get("messages")
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
        if role not in CHAT_ROLES:
            raise invalid_request(
                f"`{where}.role` must be one of {', '.join(sorted(CHAT_ROLES))}; got {role!r}.", param=f"{where}.role"
            )
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise invalid_request(f"`{where}.content` must be a string or an array of parts.", param=f"{where}.content")
        if content is None and role != "assistant":
            raise invalid_request(f"`{where}.content` is required for role {role}.", param=f"{where}.content")
    stream = _check_stream(body)
    _check_sampling(body)
    _check_optional_int(body, "max_completion_tokens", minimum=1, maximum=MAX_TOKENS_LIMIT)
    _check_optional_int(body, "n", minimum=1, maximum=1)
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise invalid_request("`stream_options` must be an object.", param="stream_options")
    return ParsedRequest(model=model, stream=stream, body=body, size=len(raw))


def _check_sampling(body: dict[str, Any]) -> None:
    _check_optional_int(body, "max_tokens", minimum=1, maximum=MAX_TOKENS_LIMIT)
    _check_optional_number(body, "temperature", minimum=0, maximum=2)
    _check_optional_number(body, "top_p", minimum=0, maximum=1)


def validate_completion(raw: bytes) -> ParsedRequest:
    """/v1/completions: a prompt (string, or array of strings or token ids) instead of messages."""
    body = parse_json_object(raw)
    model = _require_model(body)
    prompt = body.get("prompt")
    if prompt is None:
        raise invalid_request("Missing required parameter: 'prompt'.", param="prompt")
    valid = isinstance(prompt, str) or (
        isinstance(prompt, list) and prompt and all(isinstance(p, (str, int)) and not isinstance(p, bool) for p in prompt)
    )
    if not valid:
        raise invalid_request("`prompt` must be a string or a non-empty array of strings or token ids.",
                              param="prompt")
    stream = _check_stream(body)
    _check_sampling(body)
    return ParsedRequest(model=model, stream=stream, body=body, size=len(raw))


def apply_output_cap(body: dict[str, Any], *, cap: int) -> dict[str, Any]:
    """Clients such as Copilot send no max_tokens; a small model can then run to the end of its
    context. Apply the model's cap when the client set none, and never let it exceed the cap."""
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    body = dict(body)
    body.pop("max_completion_tokens", None)
    body["max_tokens"] = min(requested, cap) if isinstance(requested, int) else cap
    return body
