"""The public API's routes. Thin: each names its dialect (inference/protocols/) and hands the
request to the pipeline (inference/pipeline.py), or, for the few routes that generate nothing
(model lists, Copilot's Ollama discovery, unknown routes), answers from the catalogue."""
from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from fleet.selectors import ModelView, fleet_snapshot, models_for_pool
from core import errors
from inference import pipeline
from inference.auth import authenticate, key_from_headers
from inference.openapi import openapi_document
from inference.protocols import anthropic, ollama, openai_chat, openai_completions, responses
from inference.protocols.base import Protocol
from inference.request_log import RequestRecord

View = Callable[..., Coroutine[Any, Any, HttpResponseBase]]


def _method_not_allowed(request: HttpRequest, protocol: Protocol, methods: tuple[str, ...]) -> HttpResponseBase:
    error = errors.ApiError(405, f"Method {request.method} is not allowed here; use {' or '.join(methods)}.")
    response = pipeline.error_response(protocol, error)
    response["Allow"] = ", ".join(methods)
    response["X-Content-Type-Options"] = "nosniff"
    return response


def generating(protocol: Protocol, *, methods: tuple[str, ...] = ("POST",), generates: bool = True,
               key_in_path: bool = False) -> View:
    """A route whose requests go through the pipeline."""

    @csrf_exempt
    async def view(request: HttpRequest, key: str | None = None) -> HttpResponseBase:
        if request.method not in methods:
            return _method_not_allowed(request, protocol, methods)
        raw_key = key if key_in_path else key_from_headers(request.headers)
        return await pipeline.serve(request, protocol, raw_key=raw_key, generates=generates)

    return view


def answering(protocol: Protocol, *methods: str) -> Callable[[View], View]:
    """A route that generates nothing: its outcome is still in the client's envelope, counted
    and logged like any other request."""

    def decorate(handler: View) -> View:
        @csrf_exempt
        @functools.wraps(handler)
        async def view(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
            if request.method not in methods:
                return _method_not_allowed(request, protocol, methods)
            record = pipeline.new_record(request, protocol)
            status, error_code = 500, "internal_error"
            try:
                response = await handler(request, record, *args, **kwargs)
                status, error_code = response.status_code, ""
            except asyncio.CancelledError:
                status, error_code = pipeline.CLIENT_CLOSED, "client_closed"
                raise
            except Exception as exc:
                response, error_code = pipeline.failure_response(protocol, exc, path=record.path)
                status = response.status_code
            finally:
                await pipeline.end(record, status=status, error_code=error_code)
            response["X-Content-Type-Options"] = "nosniff"
            return response

        return view

    return decorate


async def visible_models(record: RequestRecord, raw_key: str | None) -> list[ModelView]:
    """The catalogue models this key may use."""
    identity = await authenticate(raw_key)
    record.identify(identity)
    snapshot = await fleet_snapshot(pool_id=identity.pool_id)
    return [m for m in models_for_pool(snapshot, identity.pool_id) if identity.policy.allows_model(m.public_id)]


# --- OpenAI ----------------------------------------------------------------------------------

chat_completions = generating(openai_chat.PROTOCOL)
completions = generating(openai_completions.PROTOCOL)
responses_create = generating(responses.PROTOCOL)


@answering(openai_chat.PROTOCOL, "GET")
async def models_list(request: HttpRequest, record: RequestRecord) -> HttpResponseBase:
    return JsonResponse(ollama.openai_model_list(await visible_models(record, key_from_headers(request.headers))))


async def openapi(request: HttpRequest) -> HttpResponseBase:
    """Public: clients and tools read it before they have a key. Its `model` fields name the
    catalogue's models."""
    snapshot = await fleet_snapshot()
    return JsonResponse(openapi_document(list(snapshot.models)))


@answering(openai_chat.PROTOCOL, "GET", "POST", "PUT", "PATCH", "DELETE")
async def not_found(request: HttpRequest, record: RequestRecord, rest: str = "", key: str = "") -> HttpResponseBase:
    raise errors.ApiError(404, f"Unknown API route: {request.method} {record.path}", code="unknown_url")


# --- Anthropic -------------------------------------------------------------------------------

messages = generating(anthropic.PROTOCOL)
count_tokens = generating(anthropic.COUNT_TOKENS, generates=False)


# --- Copilot's Ollama provider, under /ollama/<key>/ (no auth header: the key is in the path) ---

ollama_chat_completions = generating(openai_chat.OLLAMA_CHAT, key_in_path=True)


@answering(openai_chat.OLLAMA_API, "GET")
async def ollama_version(request: HttpRequest, record: RequestRecord, key: str) -> HttpResponseBase:
    identity = await authenticate(key)
    record.identify(identity)
    return JsonResponse(ollama.version())


@answering(openai_chat.OLLAMA_API, "GET")
async def ollama_tags(request: HttpRequest, record: RequestRecord, key: str) -> HttpResponseBase:
    return JsonResponse(ollama.tags(await visible_models(record, key)))


@answering(openai_chat.OLLAMA_API, "POST")
async def ollama_show(request: HttpRequest, record: RequestRecord, key: str) -> HttpResponseBase:
    models = {m.public_id: m for m in await visible_models(record, key)}
    return JsonResponse(ollama.show(request.body, models))


@answering(openai_chat.OLLAMA_CHAT, "GET")
async def ollama_models_list(request: HttpRequest, record: RequestRecord, key: str) -> HttpResponseBase:
    return JsonResponse(ollama.openai_model_list(await visible_models(record, key)))
