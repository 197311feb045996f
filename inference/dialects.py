"""How each client protocol spells the gateway's own stream events. Pure: no Django.

The worker's chunks pass through untouched; the gateway adds only keep-alives while a request
waits for a slot and an error event when a worker fails after the stream has started.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from inference.errors import ApiError

# Anthropic's error types by HTTP status (their API reference).
ANTHROPIC_ERROR_TYPES = {
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


def anthropic_status(error: ApiError) -> int:
    """503 "no worker can serve" is Anthropic's 529 overloaded, which Claude Code retries."""
    return 529 if error.status == 503 else error.status


def anthropic_body(error: ApiError) -> dict[str, object]:
    status = anthropic_status(error)
    kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


@dataclass(frozen=True)
class Dialect:
    keepalive: bytes
    error_event: Callable[[ApiError], bytes]


def _openai_error(error: ApiError) -> bytes:
    return b"data: " + json.dumps(error.openai_body()).encode() + b"\n\ndata: [DONE]\n\n"


def _anthropic_error(error: ApiError) -> bytes:
    return b"event: error\ndata: " + json.dumps(anthropic_body(error)).encode() + b"\n\n"


OPENAI = Dialect(keepalive=b": waiting for a free worker\n\n", error_event=_openai_error)
ANTHROPIC = Dialect(keepalive=b'event: ping\ndata: {"type": "ping"}\n\n', error_event=_anthropic_error)
