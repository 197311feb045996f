"""The public API's handlers, served by the lean path (core/lean_asgi.py; the route table is
inference/routes.py). Thin: each names its dialect (inference/protocols/) and hands the request
to the pipeline (inference/pipeline.py), or, for the few routes that generate nothing (model
lists, Copilot's Ollama discovery, unknown routes), answers from the catalogue."""
from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from django.conf import settings

from accounts.key_cache import KeyIdentity
from core import errors
from core.api_http import Request, Response, json_response
from fleet.selectors import ModelView, fleet_snapshot, models_for_pool
from inference import pipeline
from inference.auth import authenticate, key_from_headers
from inference.chat_page import chat_key_from_cookies, chat_request_refusal
from inference.openapi import openapi_document
from inference.protocols import anthropic, ollama, openai_chat, openai_completions, responses
from inference.protocols.base import Protocol
from inference.request_context import RequestContext

View = Callable[..., Coroutine[Any, Any, Response]]


def _method_not_allowed(request: Request, protocol: Protocol, methods: tuple[str, ...]) -> Response:
    error = errors.ApiError(405, f"Method {request.method} is not allowed here; use {' or '.join(methods)}.")
    response = pipeline.error_response(protocol, error)
    response["Allow"] = ", ".join(methods)
    response["X-Content-Type-Options"] = "nosniff"
    return response


async def _generate(request: Request, protocol: Protocol, *, raw_key: str | None,
                    methods: tuple[str, ...] = ("POST",), generates: bool = True) -> Response:
    """A request that goes through the pipeline (inference/pipeline.py serve())."""
    if request.method not in methods:
        return _method_not_allowed(request, protocol, methods)
    return await pipeline.serve(request, protocol, raw_key=raw_key, generates=generates)


def answering(protocol: Protocol, *methods: str) -> Callable[[View], View]:
    """A route that generates nothing: its outcome is still in the client's envelope, counted
    and logged like any other request."""

    def decorate(handler: View) -> View:
        @functools.wraps(handler)
        async def view(request: Request, *args: object, **kwargs: object) -> Response:
            if request.method not in methods:
                return _method_not_allowed(request, protocol, methods)
            request_ctx = pipeline.new_context(request, protocol)
            status, error_code = 500, "internal_error"
            try:
                response = await handler(request, request_ctx, *args, **kwargs)
                status, error_code = response.status_code, ""
            except asyncio.CancelledError:
                status, error_code = pipeline.CLIENT_CLOSED, "client_closed"
                raise
            except Exception as exc:
                response, error_code = pipeline.failure_response(protocol, exc, path=request_ctx.path)
                status = response.status_code
            finally:
                await pipeline.end(request_ctx, status=status, error_code=error_code)
            response["X-Content-Type-Options"] = "nosniff"
            return response

        return view

    return decorate


async def visible_models(request: Request, request_ctx: RequestContext, raw_key: str | None) -> list[ModelView]:
    """The catalogue models this key may use."""
    identity = await authenticate(raw_key, request, identified=request_ctx.identify)
    return await models_of(identity)


async def models_of(identity: KeyIdentity) -> list[ModelView]:
    snapshot = await fleet_snapshot(pool_id=identity.pool_id)
    return [m for m in models_for_pool(snapshot, identity.pool_id) if identity.policy.allows_model(m.public_id)]


# --- OpenAI ----------------------------------------------------------------------------------

async def chat_completions(request: Request) -> Response:
    """POST /v1/chat/completions"""
    return await _generate(request, openai_chat.PROTOCOL, raw_key=key_from_headers(request.headers))


async def chat_page_completions(request: Request) -> Response:
    """POST /chat/v1/chat/completions: the site's chat page (portal/chat.py), with the key from its
    HttpOnly cookie, from this site's own page only (inference/chat_page.py); then the same
    pipeline as /v1/chat/completions. Any key in the headers is ignored here."""
    refused = chat_request_refusal(request.headers, trusted_origins=settings.CSRF_TRUSTED_ORIGINS)
    if refused is not None:
        response = pipeline.error_response(openai_chat.PROTOCOL, errors.ApiError(
            403, refused, type="permission_error", code="chat_origin_refused"))
        response["X-Content-Type-Options"] = "nosniff"
        return response
    return await _generate(request, openai_chat.PROTOCOL,
                           raw_key=chat_key_from_cookies(request.headers.get("Cookie", "")))


async def completions(request: Request) -> Response:
    """POST /v1/completions"""
    return await _generate(request, openai_completions.PROTOCOL, raw_key=key_from_headers(request.headers))


async def responses_create(request: Request) -> Response:
    """POST /v1/responses"""
    return await _generate(request, responses.PROTOCOL, raw_key=key_from_headers(request.headers))


@answering(openai_chat.PROTOCOL, "GET")
async def models_list(request: Request, request_ctx: RequestContext) -> Response:
    models = await visible_models(request, request_ctx, key_from_headers(request.headers))
    return json_response(ollama.openai_model_list(models))


async def openapi(request: Request) -> Response:
    """Public: clients and tools read it before they have a key, and then it names no model.
    With a key, its `model` fields name the models that key may use (as /v1/models lists them);
    a wrong key gets 401."""
    raw_key = key_from_headers(request.headers)
    if raw_key is None:
        return json_response(openapi_document())
    try:
        identity = await authenticate(raw_key, request)
    except errors.ApiError as error:
        return pipeline.error_response(openai_chat.PROTOCOL, error)
    return json_response(openapi_document([m.public_id for m in await models_of(identity)]))


@answering(openai_chat.PROTOCOL, "GET", "POST", "PUT", "PATCH", "DELETE")
async def not_found(request: Request, request_ctx: RequestContext, rest: str = "", key: str = "") -> Response:
    raise errors.ApiError(404, f"Unknown API route: {request.method} {request_ctx.path}", code="unknown_url")


# --- Anthropic -------------------------------------------------------------------------------

async def messages(request: Request) -> Response:
    """POST /v1/messages"""
    return await _generate(request, anthropic.PROTOCOL, raw_key=key_from_headers(request.headers))


async def count_tokens(request: Request) -> Response:
    """POST /v1/messages/count_tokens: the prompt is measured by a worker, nothing is generated."""
    return await _generate(request, anthropic.COUNT_TOKENS, raw_key=key_from_headers(request.headers),
                           generates=False)


# --- Copilot's Ollama provider, under /ollama/<key>/ (no auth header: the key is in the path) ---

async def ollama_chat_completions(request: Request, key: str) -> Response:
    """POST /ollama/<key>/v1/chat/completions"""
    return await _generate(request, openai_chat.OLLAMA_CHAT, raw_key=key)


@answering(openai_chat.OLLAMA_API, "GET")
async def ollama_version(request: Request, request_ctx: RequestContext, key: str) -> Response:
    await authenticate(key, request, identified=request_ctx.identify)
    return json_response(ollama.version())


@answering(openai_chat.OLLAMA_API, "GET")
async def ollama_tags(request: Request, request_ctx: RequestContext, key: str) -> Response:
    return json_response(ollama.tags(await visible_models(request, request_ctx, key)))


@answering(openai_chat.OLLAMA_API, "POST")
async def ollama_show(request: Request, request_ctx: RequestContext, key: str) -> Response:
    models = {m.public_id: m for m in await visible_models(request, request_ctx, key)}
    return json_response(ollama.show(request.body, models))


@answering(openai_chat.OLLAMA_CHAT, "GET")
async def ollama_models_list(request: Request, request_ctx: RequestContext, key: str) -> Response:
    return json_response(ollama.openai_model_list(await visible_models(request, request_ctx, key)))
