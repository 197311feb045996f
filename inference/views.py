"""The OpenAI-compatible endpoint (and Copilot's Ollama route, which reuses it). Native async
views: parse, call dispatch, render."""
from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from contextlib import aclosing
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from accounts.key_cache import KeyIdentity
from fleet.scheduler import conversation_key
from fleet.selectors import fleet_snapshot, models_for_pool
from inference import dispatch, errors
from inference.admission import Want
from inference.auth import authenticate, key_from_headers
from inference.dialects import OPENAI, Dialect
from inference.dispatch import Transform
from inference.forced_tools import StreamConverter, convert_response, plan_forced_tool, rewrite_request
from inference.metrics import REFUSALS, REQUESTS
from inference.openapi import openapi_document
from inference.quota_gate import admit, check_access, reservation
from inference.reasoning import ReasoningMirror, mirror_reasoning
from inference.request_log import RequestRecord
from inference.validation import ParsedRequest, apply_output_cap, validate_chat, validate_completion
from ocsweb.lib.redact import redact

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
    Every outcome is counted in ocs_requests_total and written to the request log, with what the
    view learnt (`note_request`); a streamed answer is logged when its last byte is out."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        async def wrapper(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
            record = RequestRecord(client=client, path=redact(request.path)[:100],  # /ollama/<key>/…
                                   user_agent=request.headers.get("User-Agent", ""))
            request.ocs_record = record  # type: ignore[attr-defined]
            response: HttpResponseBase
            error_code = ""
            if request.method not in methods:
                error = errors.ApiError(405, f"Method {request.method} is not allowed here; use {' or '.join(methods)}.")
                response = render(error)
                response["Allow"] = ", ".join(methods)
            else:
                try:
                    response = await view(request, *args, **kwargs)
                except errors.ApiError as error:
                    response = render(error)
                    error_code = error.code or error.type
                    if error.status == 429:
                        REFUSALS.labels(error.reason or error.code or "rate_limit").inc()
                except RequestDataTooBig:
                    response = render(errors.ApiError(413, "The request body is too large.", code="request_too_large"))
                    error_code = "request_too_large"
                except asyncio.CancelledError:  # the client left, or the gateway is stopping
                    await record.finish(status=499, error_code="cancelled")
                    raise
                except Exception:
                    log.exception("unhandled error on %s", request.path)
                    response = render(errors.ApiError(500, "The gateway hit an internal error; it has been logged.",
                                                      type="server_error"))
                    error_code = "internal_error"
            # The hot paths skip SecurityMiddleware (ocsweb/asgi.py); HSTS comes from the HTTPS proxy.
            response["X-Content-Type-Options"] = "nosniff"
            if record.ticket is not None:
                for name, value in record.ticket.headers.items():
                    response.setdefault(name, value)
            REQUESTS.labels(client, record.model or "-", record.pool or "-", str(response.status_code)).inc()
            if not getattr(response, "ocs_logs_itself", False):
                await record.finish(status=response.status_code, error_code=error_code)
            return response

        return wrapper

    return decorate


async def _log_when_done(chunks: AsyncGenerator[bytes, None], record: RequestRecord) -> AsyncIterator[bytes]:
    try:
        async with aclosing(chunks) as body:
            async for chunk in body:
                yield chunk
    finally:
        await record.finish(status=200, error_code=record.stream_error)


def note_request(request: HttpRequest, identity: KeyIdentity, *, model: str = "", stream: bool = False) -> RequestRecord:
    """Tell the request's log record (and metrics) who is asking for what."""
    record: RequestRecord = request.ocs_record  # type: ignore[attr-defined]
    record.user_id, record.key_id, record.pool = identity.user_id, identity.key_id, identity.pool_name
    record.model, record.stream = model, stream
    return record


@api_view("GET")
async def models_list(request: HttpRequest) -> HttpResponseBase:
    identity = await authenticate(key_from_headers(request.headers))
    note_request(request, identity)
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
        if identity.policy.allows_model(model.public_id)
    ]
    return JsonResponse({"object": "list", "data": data})


@api_view("POST")
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    return await chat(request, raw_key=key_from_headers(request.headers))


@api_view("POST")
async def completions(request: HttpRequest) -> HttpResponseBase:
    identity = await authenticate(key_from_headers(request.headers))
    parsed = validate_completion(request.body)
    record = note_request(request, identity, model=parsed.model, stream=parsed.stream)
    want = Want(user_id=identity.user_id, pool_id=identity.pool_id, model_id=parsed.model)
    return await forward(parsed, path=COMPLETIONS_PATH, want=want, identity=identity, record=record)


async def chat(request: HttpRequest, *, raw_key: str | None) -> HttpResponseBase:
    identity = await authenticate(raw_key)
    parsed = validate_chat(request.body)
    record = note_request(request, identity, model=parsed.model, stream=parsed.stream)
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
            return await forward(parsed, path=CHAT_PATH, want=want, identity=identity, record=record,
                                 convert=mirror_reasoning, stream_transform=lambda: ReasoningMirror().feed)
        return await forward(parsed, path=CHAT_PATH, want=want, identity=identity, record=record)
    return await forward(
        parsed, path=CHAT_PATH, want=want, identity=identity, record=record,
        rewrite=lambda body: rewrite_request(body, plan),
        convert=lambda data: convert_response(data, plan),
        stream_transform=lambda: StreamConverter(plan).feed,
    )


async def forward(
    parsed: ParsedRequest,
    *,
    path: str,
    want: Want,
    identity: KeyIdentity,
    record: RequestRecord,
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    stream_transform: Callable[[], Transform] | None = None,
    dialect: Dialect = OPENAI,
) -> HttpResponseBase:
    """Send a validated request to a worker and answer the client. `rewrite` changes the body the
    worker gets; `convert` / `stream_transform` change what comes back (forced tool calls,
    protocol translation). Most requests need none of them: chunks then pass through untouched.
    The student's limits are charged first (quota_gate); the record settles them at the end."""
    check_access(identity, parsed.model)
    await dispatch.ensure_model_visible(model_id=parsed.model, pool_id=want.pool_id)
    snapshot = await fleet_snapshot()
    model = snapshot.models[parsed.model]
    body = apply_output_cap(parsed.body, cap=model.max_output_tokens)
    record.ticket = await admit(identity, reserve=reservation(
        body_bytes=parsed.size, max_tokens=body["max_tokens"], context_length=model.context_length))
    record.want = want
    if rewrite is not None:
        body = rewrite(body)
    if parsed.stream:
        transform = stream_transform() if stream_transform is not None else None
        return await _stream(path=path, body=body, want=want, record=record, transform=transform, dialect=dialect)
    status, content, _worker = await dispatch.forward_json(path=path, body=body, want=want, record=record)
    if convert is not None:
        content = json.dumps(convert(json.loads(content))).encode()
    return HttpResponse(content, status=status, content_type="application/json")


async def _stream(
    *, path: str, body: dict[str, Any], want: Want, record: RequestRecord, transform: Transform | None,
    dialect: Dialect,
) -> HttpResponseBase:
    """Wait briefly for the first chunk so that refusals keep their HTTP status; past the grace
    period, start the event stream and keep the client informed while the request queues."""
    opening = asyncio.ensure_future(dispatch.open_stream(path=path, body=body, want=want, record=record,
                                                         dialect=dialect))
    try:
        await asyncio.wait_for(asyncio.shield(opening), timeout=settings.OCS["STREAM_QUEUE_GRACE_S"])
    except asyncio.TimeoutError:
        return event_stream(dispatch.stream_with_keepalive(opening, transform=transform, dialect=dialect,
                                                           record=record), record)
    except BaseException:
        if not opening.done():
            opening.cancel()
        raise
    return event_stream(dispatch.relay(opening.result(), transform), record)


def event_stream(chunks: AsyncGenerator[bytes, None], record: RequestRecord) -> StreamingHttpResponse:
    """The SSE response; its request is logged (and its limits settled) after the last chunk."""
    response = StreamingHttpResponse(_log_when_done(chunks, record), content_type="text/event-stream")
    response.ocs_logs_itself = True  # type: ignore[attr-defined]
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def openapi(request: HttpRequest) -> HttpResponseBase:
    """Public: clients and tools read it before they have a key."""
    return JsonResponse(openapi_document())


@api_view("GET", "POST", "PUT", "PATCH", "DELETE")
async def not_found(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    raise errors.ApiError(404, f"Unknown API route: {request.method} {request.path}", code="unknown_url")
