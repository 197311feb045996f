"""Checks shared by every dialect (inference/protocols/): reading the body as JSON safely, and
the common fields' types and ranges. Pure: no Django."""
from __future__ import annotations

import json
import math
import re
from typing import Any

from core.errors import context_length_exceeded, invalid_request

MAX_TOKENS_LIMIT = 1_000_000


MAX_JSON_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _reject_constant(name: str) -> None:
    raise invalid_request(f"The request body is not valid JSON: {name} is not a JSON number.")


def _too_deep(value: Any) -> bool:
    """True when containers nest deeper than MAX_JSON_DEPTH (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values() if isinstance(child, (dict, list)))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return False


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class _OutOfRange(ValueError):
    pass


def _finite_float(text: str) -> float:
    """A JSON number as a double; one outside the double's range (1e400) would become Infinity,
    which is no JSON a worker can be sent."""
    value = float(text)
    if math.isinf(value):
        raise _OutOfRange(text)
    return value


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what is wrong. Refuses what strict JSON
    refuses and what would break later steps: NaN and Infinity, numbers outside the double's
    range (1e400, which would become Infinity), lone surrogates (they cannot be
    sent on as UTF-8), integers too long to parse, nesting deeper than MAX_JSON_DEPTH."""
    if not raw:
        raise invalid_request("The request body is empty; send a JSON object.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_request("The request body is not valid UTF-8.") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except _OutOfRange as exc:
        raise invalid_request(f"The request body holds the number {str(exc)[:40]}, outside the range of a "
                              "double (about ±1.8e308).") from None
    except json.JSONDecodeError as exc:
        raise invalid_request(f"The request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}.") from None
    except RecursionError:
        raise invalid_request(f"The request body nests deeper than {MAX_JSON_DEPTH} levels.") from None
    except ValueError as exc:  # e.g. an integer longer than Python's int_max_str_digits
        raise invalid_request(f"The request body is not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    # Cheap byte counts first: the walks run only for bodies that could fail them.
    if raw.count(b"{") + raw.count(b"[") > MAX_JSON_DEPTH and _too_deep(body):
        raise invalid_request(f"The request body nests deeper than {MAX_JSON_DEPTH} levels.")
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(body):
        raise invalid_request("The request body holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text.")
    return body


def require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise invalid_request("you must provide a model parameter", param="model")
    if not isinstance(model, str) or not model.strip():
        raise invalid_request("`model` must be a non-empty string.", param="model")
    return model


def check_optional_int(body: dict[str, Any], name: str, *, minimum: int, maximum: int) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_request(f"`{name}` must be an integer.", param=name)
    if not minimum <= value <= maximum:
        raise invalid_request(f"`{name}` must be between {minimum} and {maximum}, got {value}.", param=name)


def check_optional_number(body: dict[str, Any], name: str, *, minimum: float, maximum: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid_request(f"`{name}` must be a number.", param=name)
    if not minimum <= value <= maximum:
        raise invalid_request(f"`{name}` must be between {minimum} and {maximum}, got {value}.", param=name)


def check_stream(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise invalid_request("`stream` must be true or false.", param="stream")
    return stream


def check_sampling(body: dict[str, Any]) -> None:
    check_optional_int(body, "max_tokens", minimum=1, maximum=MAX_TOKENS_LIMIT)
    check_optional_number(body, "temperature", minimum=0, maximum=2)
    check_optional_number(body, "top_p", minimum=0, maximum=1)


def output_cap(requested: int | None, *, cap: int) -> int:
    """Clients such as Copilot send no max_tokens; a small model can then run to the end of its
    context. The model's cap applies when the client set none, and the client's never exceeds it."""
    return min(requested, cap) if isinstance(requested, int) and requested > 0 else cap


# A body of more bytes than this per token of the model's context cannot fit in it: text runs at
# about 4 bytes a token, and even JSON-escaped non-ASCII text (\uXXXX, 6 bytes a character) stays
# near 12. Such a body is refused at the gateway, before any worker parses or tokenizes it.
MAX_BODY_BYTES_PER_CONTEXT_TOKEN = 16


def check_fits_context(*, body_bytes: int, context_tokens: int) -> None:
    """Refuse (context_length_exceeded) a body far larger than the model's context."""
    if context_tokens > 0 and body_bytes > context_tokens * MAX_BODY_BYTES_PER_CONTEXT_TOKEN:
        raise context_length_exceeded(
            prompt_tokens=None, context_tokens=None,
            detail=f"the request is {body_bytes:,} bytes, far more than the model's context of {context_tokens:,} "
                   "tokens can hold")
