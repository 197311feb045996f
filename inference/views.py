"""The OpenAI-compatible endpoint. Native async views: parse, call dispatch, render."""
from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from fleet.scheduler import conversation_key
from fleet.selectors import fleet_snapshot, models_for_pool
from inference import dispatch, errors
from inference.admission import Lease, Want
from inference.auth import authenticate, key_from_headers
from inference.validation import apply_output_cap, validate_chat

log = logging.getLogger("ocs.api")

View = Callable[..., Awaitable[HttpResponse]]
CHAT_PATH = "/v1/chat/completions"


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
    want = Want(
        user_id=identity.user_id,
        pool_id=identity.pool_id,
        model_id=chat.model,
        conversation=conversation_key(user_id=identity.user_id, model_id=chat.model, messages=chat.body["messages"]),
    )
    key_lease = await dispatch.claim_key_concurrency(identity.key_id)
    try:
        if chat.stream:
            return await _stream(body=body, want=want, key_lease=key_lease)
        status, content, _worker = await dispatch.forward_json(path=CHAT_PATH, body=body, want=want)
    finally:
        if not chat.stream:
            await key_lease.release()
    return HttpResponse(content, status=status, content_type="application/json")


async def _stream(*, body: dict, want: Want, key_lease: Lease) -> HttpResponse:
    """Wait briefly for the first chunk so that refusals keep their HTTP status; past the grace
    period, start the event stream and keep the client informed while the request queues."""
    opening = asyncio.ensure_future(dispatch.open_stream(path=CHAT_PATH, body=body, want=want))
    try:
        await asyncio.wait_for(asyncio.shield(opening), timeout=settings.OCS["STREAM_QUEUE_GRACE_S"])
    except asyncio.TimeoutError:
        return _event_stream(dispatch.stream_with_keepalive(opening, key_lease))
    except BaseException:
        if not opening.done():
            opening.cancel()
        await key_lease.release()
        raise
    return _event_stream(dispatch.stream_then_release(opening.result(), key_lease))


def _event_stream(chunks: AsyncIterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


@api_view("GET", "POST", "PUT", "PATCH", "DELETE")
async def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    raise errors.ApiError(404, f"Unknown API route: {request.method} {request.path}", code="unknown_url")
