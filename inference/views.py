"""The OpenAI-compatible endpoint. Native async views: parse, call dispatch, render."""
from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from fleet.selectors import fleet_snapshot, models_for_pool
from inference import dispatch, errors
from inference.auth import authenticate, key_from_headers
from inference.validation import apply_output_cap, validate_chat

log = logging.getLogger("ocs.api")

View = Callable[..., Awaitable[HttpResponse]]


def error_response(error: errors.ApiError) -> HttpResponse:
    response = HttpResponse(error.openai_json(), status=error.status, content_type="application/json")
    for name, value in error.headers.items():
        response[name] = value
    return response


def api_view(*methods: str) -> Callable[[View], View]:
    """Every outcome of an API view is JSON in the OpenAI envelope: refusals, wrong methods,
    oversized bodies and our own bugs alike (logged with the traceback, never sent)."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        async def wrapper(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
            if request.method not in methods:
                error = errors.ApiError(405, f"Method {request.method} is not allowed here; use {' or '.join(methods)}.")
                response = error_response(error)
                response["Allow"] = ", ".join(methods)
                return response
            try:
                return await view(request, *args, **kwargs)
            except errors.ApiError as error:
                return error_response(error)
            except RequestDataTooBig:
                return error_response(errors.ApiError(413, "The request body is too large.", code="request_too_large"))
            except Exception:
                log.exception("unhandled error on %s", request.path)
                return error_response(
                    errors.ApiError(500, "The gateway hit an internal error; it has been logged.", type="server_error")
                )

        return wrapper

    return decorate


@api_view("GET")
async def models_list(request: HttpRequest) -> HttpResponse:
    identity = await authenticate(key_from_headers(request.headers))
    snapshot = await fleet_snapshot(pool_id=identity.pool_id)
    data = [
        {
            "id": model.public_id,
            "object": "model",
            "created": model.created,
            "owned_by": model.owned_by,
            "context_length": model.context_length,
        }
        for model in models_for_pool(snapshot, identity.pool_id)
    ]
    return JsonResponse({"object": "list", "data": data})


@api_view("POST")
async def chat_completions(request: HttpRequest) -> HttpResponse:
    identity = await authenticate(key_from_headers(request.headers))
    chat = validate_chat(request.body)
    await dispatch.ensure_model_visible(model_id=chat.model, pool_id=identity.pool_id)
    snapshot = await fleet_snapshot()
    body = apply_output_cap(chat.body, cap=snapshot.models[chat.model].max_output_tokens)
    if chat.stream:
        stream = await dispatch.open_stream(
            path="/v1/chat/completions", body=body, model_id=chat.model, pool_id=identity.pool_id
        )
        response = StreamingHttpResponse(stream, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    status, content, _worker = await dispatch.forward_json(
        path="/v1/chat/completions", body=body, model_id=chat.model, pool_id=identity.pool_id
    )
    return HttpResponse(content, status=status, content_type="application/json")


@api_view("GET", "POST", "PUT", "PATCH", "DELETE")
async def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    raise errors.ApiError(404, f"Unknown API route: {request.method} {request.path}", code="unknown_url")
