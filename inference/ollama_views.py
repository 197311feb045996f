"""Copilot's Ollama provider (stable VS Code), under a per-student base URL that carries the key:
/ollama/<key>/. Copilot sends no auth header on these routes, so the key in the path
authenticates exactly like a bearer key (a revoked key is refused). Keys in paths are redacted
from every log line (ocsweb.lib.redact, ocsweb.gateway)."""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from fleet.selectors import ModelView, fleet_snapshot, models_for_pool
from inference import errors
from inference.auth import authenticate
from inference.validation import parse_json_object
from inference.views import api_view, chat, note_request

# Copilot requires >= 0.6.4 (or exactly 0.0.0).
OLLAMA_VERSION = "0.12.0"
COPILOT_OUTPUT_RESERVE = 4096


def _digest(model_id: str) -> str:
    return hashlib.sha256(model_id.encode()).hexdigest()


def _details(model: ModelView) -> dict[str, object]:
    return {"format": "gguf", "family": model.architecture, "families": [model.architecture],
            "parameter_size": "", "quantization_level": ""}


async def _models(request: HttpRequest, raw_key: str) -> list[ModelView]:
    identity = await authenticate(raw_key)
    note_request(request, identity)
    snapshot = await fleet_snapshot(pool_id=identity.pool_id)
    return [m for m in models_for_pool(snapshot, identity.pool_id) if identity.policy.allows_model(m.public_id)]


@api_view("GET", client="ollama")
async def version(request: HttpRequest, key: str) -> HttpResponseBase:
    note_request(request, await authenticate(key))
    return JsonResponse({"version": OLLAMA_VERSION})


@api_view("GET", client="ollama")
async def tags(request: HttpRequest, key: str) -> HttpResponseBase:
    models = await _models(request, key)
    return JsonResponse({
        "models": [
            {
                "name": model.public_id,
                "model": model.public_id,
                "modified_at": datetime.fromtimestamp(model.created, tz=timezone.utc).isoformat(),
                "size": 0,
                "digest": _digest(model.public_id),
                "details": _details(model),
            }
            for model in models
        ]
    })


@api_view("POST", client="ollama")
async def show(request: HttpRequest, key: str) -> HttpResponseBase:
    models = {m.public_id: m for m in await _models(request, key)}
    body = parse_json_object(request.body)
    name = body.get("model") or body.get("name")
    if not isinstance(name, str) or not name:
        raise errors.invalid_request("Send {\"model\": \"<id>\"}.", param="model")
    model = models.get(name)
    if model is None:
        raise errors.model_not_found(name)
    capabilities = ["completion"] + (["tools"] if model.supports_tools else [])
    return JsonResponse({
        "modelfile": "",
        "parameters": "",
        "template": "",
        "details": _details(model),
        "model_info": {
            "general.architecture": model.architecture,
            "general.basename": model.public_id,
            f"{model.architecture}.context_length": model.context_length,
        },
        "capabilities": capabilities,
        "modified_at": datetime.fromtimestamp(model.created, tz=timezone.utc).isoformat(),
    })


@api_view("POST", client="ollama")
async def chat_completions(request: HttpRequest, key: str) -> HttpResponseBase:
    return await chat(request, raw_key=key)


@api_view("GET", client="ollama")
async def models_list(request: HttpRequest, key: str) -> HttpResponseBase:
    models = await _models(request, key)
    return JsonResponse({"object": "list", "data": [
        {"id": m.public_id, "object": "model", "created": m.created, "owned_by": m.owned_by,
         "context_length": m.context_length} for m in models
    ]})
