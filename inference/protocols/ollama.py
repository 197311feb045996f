"""Copilot's Ollama provider (stable VS Code before 1.122): the discovery routes it calls under
a per-student base URL that carries the key, /ollama/<key>/ (Copilot sends no auth header
there). Answered by the gateway from the catalogue; llama-server has no /api/* routes. Chat on
that base URL is OpenAI chat (inference/protocols/openai_chat.py). Pure: no Django."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any

from core import errors
from fleet.selectors import ModelView
from inference.validation import parse_json_object

# Copilot requires >= 0.6.4 (or exactly 0.0.0).
OLLAMA_VERSION = "0.12.0"


def _digest(model_id: str) -> str:
    return hashlib.sha256(model_id.encode()).hexdigest()


def _details(model: ModelView) -> dict[str, object]:
    return {"format": "gguf", "family": model.architecture, "families": [model.architecture],
            "parameter_size": "", "quantization_level": ""}


def _modified(model: ModelView) -> str:
    return datetime.fromtimestamp(model.created, tz=timezone.utc).isoformat()


def version() -> dict[str, Any]:
    return {"version": OLLAMA_VERSION}


def tags(models: list[ModelView]) -> dict[str, Any]:
    return {"models": [{"name": m.public_id, "model": m.public_id, "modified_at": _modified(m), "size": 0,
                        "digest": _digest(m.public_id), "details": _details(m)} for m in models]}


def show(raw: bytes, models: dict[str, ModelView]) -> dict[str, Any]:
    """Copilot reads capabilities ("tools"), the architecture, and <arch>.context_length: the
    context one request can use, from which it sizes its prompts (input = context - 4096)."""
    body = parse_json_object(raw)
    name = body.get("model") or body.get("name")
    if not isinstance(name, str) or not name:
        raise errors.invalid_request("Send {\"model\": \"<id>\"}.", param="model")
    model = models.get(name)
    if model is None:
        raise errors.model_not_found(name[:200])
    return {
        "modelfile": "",
        "parameters": "",
        "template": "",
        "details": _details(model),
        "model_info": {
            "general.architecture": model.architecture,
            "general.basename": model.public_id,
            f"{model.architecture}.context_length": model.context_length,
        },
        "capabilities": ["completion"] + (["tools"] if model.supports_tools else []),
        "modified_at": _modified(model),
    }


def error_body(error: errors.ApiError) -> bytes:
    """Ollama's envelope, {"error": "<text>"}. It has no other place for our code, so the text
    starts with it ("class_paused: …", "invalid_api_key: …")."""
    return json.dumps({"error": f"{error.code}: {error.message}" if error.code else error.message}).encode()


def openai_model_list(models: list[ModelView]) -> dict[str, Any]:
    """GET /v1/models: OpenAI's list, with each model's usable context per request."""
    return {"object": "list", "data": [
        {"id": m.public_id, "object": "model", "created": m.created, "owned_by": m.owned_by,
         "context_length": m.context_length, "max_output_tokens": m.max_output_tokens} for m in models]}
