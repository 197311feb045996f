"""The OpenAI-compatible endpoint (and Copilot's Ollama route, which reuses it). Native async
views: parse, call dispatch, render."""
from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from fleet.scheduler import conversation_key
from fleet.selectors import fleet_snapshot, models_for_pool
from inference import dispatch, errors
from inference.admission import Lease, Want
from inference.auth import authenticate, key_from_headers
from inference.dialects import OPENAI, Dialect
from inference.dispatch import Transform
from inference.forced_tools import StreamConverter, convert_response, plan_forced_tool, rewrite_request
from inference.metrics import REFUSALS, REQUESTS
from inference.openapi import openapi_document
from inference.reasoning import ReasoningMirror, mirror_reasoning
from inference.validation import ParsedRequest, apply_output_cap, validate_chat, validate_completion

log = logging.getLogger("ocs.api")

View = Callable[..., Coroutine[Any, Any, HttpResponseBase]]
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


def error_response(error: errors.ApiError) -> HttpResponse:
    response = HttpResponse(error.openai_json(), status=error.status, content_type="application/json")
    for name, value in error.headers.items():
        response[name] = value
    return response


def api_view(
    *methods: str, render: Callable[[errors.ApiError], HttpResponseBase] = error_response, client: str = "openai"
) -> Callable[[View], View]:
    """Every outcome of an API view is JSON in the client's envelope (`render`): refusals, wrong
    methods, oversized bodies and our own bugs alike (logged with the traceback, never sent).
    Every outcome is counted in ocs_requests_total, labelled with what the view learnt
    (`label_request`) and the client protocol."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        async def wrapper(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
            response: HttpResponseBase
            if request.method not in methods:
                error = errors.ApiError(405, f"Method {request.method} is not allowed here; use {' or '.join(methods)}.")
                response = render(error)
                response["Allow"] = ", ".join(methods)
            else:
                try:
                    response = await view(request, *args, **kwargs)
                except errors.ApiError as error:
                    response = render(error)
                    if error.status == 429:
                        REFUSALS.labels(error.code or "rate_limit").inc()
                except RequestDataTooBig:
                    response = render(errors.ApiError(413, "The request body is too large.", code="request_too_large"))
                except Exception:
                    log.exception("unhandled error on %s", request.path)
                    response = render(errors.ApiError(500, "The gateway hit an internal error; it has been logged.",
                                                      type="server_error"))
            # The hot paths skip SecurityMiddleware (ocsweb/asgi.py); HSTS comes from the HTTPS proxy.
            response["X-Content-Type-Options"] = "nosniff"
            model, pool = getattr(request, "ocs_labels", ("-", "-"))
            REQUESTS.labels(client, model, pool, str(response.status_code)).inc()
            return response

        return wrapper

    return decorate


def label_request(request: HttpRequest, *, model: str, pool: str) -> None:
    request.ocs_labels = (model, pool)  # type: ignore[attr-defined]


@api_view("GET")
async def models_list(request: HttpRequest) -> HttpResponseBase:
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
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    return await chat(request, raw_key=key_from_headers(request.headers))


@api_view("POST")
async def completions(request: HttpRequest) -> HttpResponseBase:
    identity = await authenticate(key_from_headers(request.headers))
    parsed = validate_completion(request.body)
    label_request(request, model=parsed.model, pool=identity.pool_name)
    want = Want(user_id=identity.user_id, pool_id=identity.pool_id, model_id=parsed.model)
    return await forward(parsed, path=COMPLETIONS_PATH, want=want, key_id=identity.key_id)


async def chat(request: HttpRequest, *, raw_key: str | None) -> HttpResponseBase:
    identity = await authenticate(raw_key)
    parsed = validate_chat(request.body)
    label_request(request, model=parsed.model, pool=identity.pool_name)
    plan = plan_forced_tool(parsed.body)
    want = Want(
        user_id=identity.user_id,
        pool_id=identity.pool_id,
        model_id=parsed.model,
        conversation=conversation_key(user_id=identity.user_id, model_id=parsed.model, messages=parsed.body["messages"]),
    )
    if plan is None:
        snapshot = await fleet_snapshot()
        model = snapshot.models.get(parsed.model)
        if model is not None and model.reasoning:
            return await forward(parsed, path=CHAT_PATH, want=want, key_id=identity.key_id,
                                 convert=mirror_reasoning, stream_transform=lambda: ReasoningMirror().feed)
        return await forward(parsed, path=CHAT_PATH, want=want, key_id=identity.key_id)
    return await forward(
        parsed, path=CHAT_PATH, want=want, key_id=identity.key_id,
        rewrite=lambda body: rewrite_request(body, plan),
        convert=lambda data: convert_response(data, plan),
        stream_transform=lambda: StreamConverter(plan).feed,
    )


async def forward(
    parsed: ParsedRequest,
    *,
    path: str,
    want: Want,
    key_id: int,
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    stream_transform: Callable[[], Transform] | None = None,
    dialect: Dialect = OPENAI,
) -> HttpResponseBase:
    """Send a validated request to a worker and answer the client. `rewrite` changes the body the
    worker gets; `convert` / `stream_transform` change what comes back (forced tool calls,
    protocol translation). Most requests need none of them: chunks then pass through untouched."""
    await dispatch.ensure_model_visible(model_id=parsed.model, pool_id=want.pool_id)
    snapshot = await fleet_snapshot()
    body = apply_output_cap(parsed.body, cap=snapshot.models[parsed.model].max_output_tokens)
    if rewrite is not None:
        body = rewrite(body)
    key_lease = await dispatch.claim_key_concurrency(key_id)
    if parsed.stream:
        transform = stream_transform() if stream_transform is not None else None
        return await _stream(path=path, body=body, want=want, key_lease=key_lease, transform=transform,
                             dialect=dialect)
    try:
        status, content, _worker = await dispatch.forward_json(path=path, body=body, want=want)
    finally:
        await key_lease.release()
    if convert is not None:
        content = json.dumps(convert(json.loads(content))).encode()
    return HttpResponse(content, status=status, content_type="application/json")


async def _stream(
    *, path: str, body: dict[str, Any], want: Want, key_lease: Lease, transform: Transform | None, dialect: Dialect
) -> HttpResponseBase:
    """Wait briefly for the first chunk so that refusals keep their HTTP status; past the grace
    period, start the event stream and keep the client informed while the request queues."""
    opening = asyncio.ensure_future(dispatch.open_stream(path=path, body=body, want=want, dialect=dialect))
    try:
        await asyncio.wait_for(asyncio.shield(opening), timeout=settings.OCS["STREAM_QUEUE_GRACE_S"])
    except asyncio.TimeoutError:
        return event_stream(dispatch.stream_with_keepalive(opening, key_lease, transform=transform, dialect=dialect))
    except BaseException:
        if not opening.done():
            opening.cancel()
        await key_lease.release()
        raise
    return event_stream(dispatch.stream_then_release(opening.result(), key_lease, transform=transform))


def event_stream(chunks: AsyncIterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def openapi(request: HttpRequest) -> HttpResponseBase:
    """Public: clients and tools read it before they have a key."""
    return JsonResponse(openapi_document())


@api_view("GET", "POST", "PUT", "PATCH", "DELETE")
async def not_found(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    raise errors.ApiError(404, f"Unknown API route: {request.method} {request.path}", code="unknown_url")
