"""Errors of the public API and their OpenAI envelope. Pure: no Django.

Every refusal on /v1 is an ApiError, rendered as
{"error": {"message": str, "type": str, "param": str|null, "code": str|null}}
with the status the official SDKs map to their exception classes.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field


@dataclass
class ApiError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = ""  # for metrics: why a 429 (requests_per_minute, concurrency, tokens_per_day, queue_timeout)

    def openai_body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def openai_json(self) -> bytes:
        return json.dumps(self.openai_body()).encode()

    def labelled_message(self) -> str:
        """The message, led by its code for the refusals a student must be able to tell apart
        (Anthropic's and Ollama's envelopes have no code field that clients show)."""
        return f"{self.code}: {self.message}" if self.code in STUDENT_REFUSALS else self.message


# Refusals about the student's situation, not the request's form: their message says what
# happened and what the student can do; dialects without a shown code lead the message with it.
STUDENT_REFUSALS = frozenset({"account_disabled", "class_paused", "budget_exhausted", "tokens_per_day_exceeded",
                              "context_length_exceeded"})


def invalid_api_key() -> ApiError:
    return ApiError(
        401,
        "Incorrect or missing API key. Get a key from your teacher or the portal and send it as "
        "'Authorization: Bearer <key>'.",
        type="invalid_request_error",
        code="invalid_api_key",
    )


def account_disabled(*, ended_at: str | None = None) -> ApiError:
    """The key is right, its owner's account is not usable: disabled by a teacher, or past the
    end of its access. Not "invalid key": a new key would not help."""
    what = (f"Your account's access ended on {ended_at}." if ended_at
            else "Your account has been disabled by your teacher.")
    return ApiError(403, f"{what} Your keys work again only once your teacher re-enables the account; ask them.",
                    type="permission_error", code="account_disabled")


def class_paused(message: str) -> ApiError:
    return ApiError(403, message, type="permission_error", code="class_paused")


def context_length_exceeded(*, prompt_tokens: int | None, context_tokens: int | None, detail: str = "") -> ApiError:
    """The prompt does not fit in the model's context per request. Says both numbers when the
    worker gave them, and what a student can do (they cannot change the worker's context)."""
    if prompt_tokens is not None and context_tokens is not None:
        sizes = (f"This request is {prompt_tokens} tokens long; the model's context holds {context_tokens} tokens "
                 "per request (prompt and answer together).")
    else:
        sizes = f"This request does not fit in the model's context ({detail or 'the worker refused it'})."
    return ApiError(400, sizes + " Start a new, shorter conversation (or remove earlier messages and files), "
                    "choose a model with a larger context, or, for coding agents, ask your teacher for the "
                    "agents profile (workers with a long context).",
                    code="context_length_exceeded", param="messages")


def model_not_found(model: str) -> ApiError:
    return ApiError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        type="invalid_request_error",
        code="model_not_found",
        param="model",
    )


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, type="invalid_request_error", code=code, param=param)


def no_worker_available(model: str) -> ApiError:
    return ApiError(
        503,
        f"No worker can serve `{model}` right now (all are down or restarting). Try again in a minute; "
        "if it persists, tell your teacher.",
        type="server_error",
        code="no_worker_available",
    )


def queue_timeout(model: str, waited_s: float, retry_after_s: int) -> ApiError:
    return ApiError(
        429,
        f"All workers serving `{model}` stayed busy for {waited_s:.0f} s. Retry after {retry_after_s} s.",
        type="requests",
        code="rate_limit_exceeded",
        headers={"retry-after": str(retry_after_s)},
        reason="queue_timeout",
    )


def too_many_bad_keys(retry_after_s: int) -> ApiError:
    """An address that sent too many unknown or wrong keys (inference/auth.py)."""
    return ApiError(
        429,
        "Too many requests with unknown or wrong API keys from your address. Retry after "
        f"{retry_after_s} s with the key the portal shows you.",
        type="requests",
        code="too_many_bad_keys",
        headers={"retry-after": str(retry_after_s)},
        reason="bad_keys",
    )


def live_state_unavailable() -> ApiError:
    """Redis (slots, limits, key revocations) cannot be reached: try again shortly. Service
    resumes by itself when it returns; /readyz says why meanwhile."""
    return ApiError(503, "The gateway cannot reach its live state right now (it is restarting). Try again in a "
                         "few seconds.", type="server_error", code="service_unavailable",
                    headers={"retry-after": "5"})


def upstream_failed(detail: str) -> ApiError:
    return ApiError(502, f"The worker failed: {detail}", type="server_error", code="upstream_error")


# llama-server error types -> (OpenAI code, status). Its bodies carry a numeric `code`.
_LLAMA_ERROR_CODES = {
    "exceed_context_size_error": ("context_length_exceeded", 400),
    "invalid_request_error": (None, 400),
    "not_supported_error": ("not_supported", 400),
    "authentication_error": ("upstream_auth", 502),
}


_CONTEXT_NUMBERS = re.compile(r"\((\d+) tokens\).*?\((\d+) tokens\)")


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_llama_server(status: int, body: bytes) -> ApiError:
    """Translate a llama-server error response into the OpenAI envelope."""
    error: dict[str, object] = {}
    try:
        found = json.loads(body).get("error") or {}
        error = found if isinstance(found, dict) else {}
        message = str(error.get("message") or "")
        kind = str(error.get("type") or "")
    except (ValueError, AttributeError):
        message, kind = body[:300].decode("utf-8", "replace"), ""
    code, mapped_status = _LLAMA_ERROR_CODES.get(kind, (None, status if 400 <= status < 500 else 502))
    if code == "context_length_exceeded":
        prompt_tokens, context_tokens = _int_or_none(error.get("n_prompt_tokens")), _int_or_none(error.get("n_ctx"))
        numbers = _CONTEXT_NUMBERS.search(message)
        if (prompt_tokens is None or context_tokens is None) and numbers:
            prompt_tokens, context_tokens = int(numbers.group(1)), int(numbers.group(2))
        return context_length_exceeded(prompt_tokens=prompt_tokens, context_tokens=context_tokens,
                                       detail=message[:200])
    if 400 <= mapped_status < 500:
        param = "messages" if code == "context_length_exceeded" else None
        return ApiError(mapped_status, message or "The worker refused the request.", code=code, param=param)
    return upstream_failed(message or f"status {status}")
