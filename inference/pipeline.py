"""One request's whole life, for every dialect (inference/protocols/):

    authenticate -> check -> admit (limits) -> choose and claim a worker -> relay -> end

`serve()` reads top to bottom in that order (its first three steps in `_admit_once()`). One
object, the RequestContext, carries the request through it (who, what, where it ran, what it
cost), and `end()` is the one place a request ends, whatever happened: its limits are settled,
its metrics counted and its log row written. A streamed answer ends when its last byte is out
(or the client leaves); every other answer ends in `serve`'s `finally`.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import replace

from django.conf import settings

from accounts.key_cache import StaleIdentity, note_generation, seen_generation, verify_generation
from accounts.limits.gate import admit, charge_refusal, check_access, reservation
from core import errors
from core.api_http import Request, Response
from core.live import LiveStateUnavailable, Settlement, live_state
from core.redact import redact
from fleet.scheduler import conversation_key
from fleet.selectors import ModelView
from inference import dispatch
from inference.admission.first_come import first_come
from inference.admission.line import Want, fair_settlement
from inference.auth import authenticate
from inference.catalogue import budget_fallback, resolve_model
from inference.client_tools import client_tool
from inference.prometheus import REFUSALS, REQUEST_STEP, REQUESTS
from inference.protocols.base import Call, Plan, Protocol, Target
from inference.request_context import STEPS, RequestContext
from inference.validation import check_fits_context, output_cap

log = logging.getLogger("ocs.api")

PIN_HEADER = "X-OCS-Worker"  # staff keys: serve on this worker only (verify_path checks each worker)
CLIENT_CLOSED = 499  # nginx's code for "the client closed the connection": logged, never sent
# An address past its allowance of bad keys (inference/auth.py) gets no request log row per
# refusal: the flood would cost a row each. Counted in the metrics (requests by status, refusals).
UNLOGGED_REFUSAL = "too_many_bad_keys"
_STEP_HISTOGRAMS = {step: REQUEST_STEP.labels(step) for step in STEPS}


def error_response(protocol: Protocol, error: errors.ApiError) -> Response:
    response = Response(protocol.error_body(error), status=protocol.error_status(error))
    for name, value in error.headers.items():
        response[name] = value
    return response


def failure_response(protocol: Protocol, exc: Exception, *, path: str) -> tuple[Response, str]:
    """The answer, in the client's envelope, to a request that ended with `exc`, and the error
    code its log row gets. Our own bugs are logged with their traceback and never sent."""
    if isinstance(exc, errors.ApiError):
        if exc.status == 429:
            REFUSALS.labels(exc.reason or exc.code or "rate_limit").inc()
        return error_response(protocol, exc), exc.code or exc.type
    if isinstance(exc, LiveStateUnavailable):
        return error_response(protocol, errors.live_state_unavailable()), "live_state_unavailable"
    log.exception("unhandled error on %s", path)
    return error_response(protocol, errors.ApiError(500, "The gateway hit an internal error; it has been logged.",
                                                    type="server_error")), "internal_error"


def new_context(request: Request, protocol: Protocol) -> RequestContext:
    return RequestContext(client=protocol.client, path=redact(request.path)[:100],  # /ollama/<key>/…
                         user_agent=request.headers.get("User-Agent", ""),
                         tool=client_tool(request.headers, path=request.path))


async def serve(request: Request, protocol: Protocol, *, raw_key: str | None,
                generates: bool = True) -> Response:
    """Answer one API request in `protocol`'s dialect. `generates`: False for requests that
    need no generation slot (count_tokens): they pass the same checks and limits, and the
    best-ranked worker answers them without claiming a slot."""
    request_ctx = new_context(request, protocol)
    streaming = False
    status, error_code = 500, "internal_error"  # until the request ends otherwise
    response: Response
    try:
        # authenticate, check, admit (again, from the database, if a key or a limit changed meanwhile)
        async with first_come("admission"):  # in order of arrival, a few at a time
            call, plan = await _admitted(request, protocol, raw_key, request_ctx, generates=generates)
        # choose and claim a worker, relay
        if not generates:
            status, content = await dispatch.forward_light(path=plan.path, body=plan.body, request_ctx=request_ctx)
            response = Response(content, status=status)
        elif call.stream:
            response = await _stream(plan, request_ctx, protocol)
            streaming = True
        else:
            status, content = await dispatch.forward_json(path=plan.path, body=plan.body, request_ctx=request_ctx)
            if plan.convert is not None:
                content = json.dumps(plan.convert(json.loads(content))).encode()
            response = Response(content, status=status)
        status, error_code = response.status_code, ""
    except asyncio.CancelledError:  # the client left, or the gateway is stopping
        status, error_code = CLIENT_CLOSED, "client_closed"
        raise
    except Exception as exc:
        response, error_code = failure_response(protocol, exc, path=request_ctx.path)
        status = response.status_code
    finally:
        if not streaming:
            request_ctx.reached("client_first_byte")  # the whole answer (or refusal) goes to the server now
            await end(request_ctx, status=status, error_code=error_code)
    _headers(response, request_ctx)
    return response


async def _admitted(request: Request, protocol: Protocol, raw_key: str | None, request_ctx: RequestContext, *,
                    generates: bool) -> tuple[Call, Plan]:
    """authenticate -> check -> admit. The key is checked against the "keys" generation this
    process saw last, which the admission reads again in its own round trip: if a key or a limit
    changed meanwhile (StaleIdentity), once more, reading the generation first, as strictly as
    ever; the request is never served or refused on a changed key's old state."""
    try:
        return await _admit_once(request, protocol, raw_key, request_ctx, generates=generates,
                                 generation=seen_generation())
    except StaleIdentity as stale:
        note_generation(stale.generation)
        return await _admit_once(request, protocol, raw_key, request_ctx, generates=generates, generation=None)


async def _admit_once(request: Request, protocol: Protocol, raw_key: str | None, request_ctx: RequestContext, *,
                      generates: bool, generation: int | None) -> tuple[Call, Plan]:
    # authenticate
    identity = await authenticate(raw_key, request, generation=generation, identified=request_ctx.identify)
    request_ctx.reached("authenticated")
    # check
    try:
        call = protocol.parse(request.body)
        model = await resolve_model(call.model, identity, maps_unknown=protocol.maps_unknown_models)
        check_access(identity, model.public_id)
        check_fits_context(body_bytes=call.size, context_tokens=model.context_length)
    except errors.ApiError:
        if generation is not None:
            await verify_generation(generation)  # not refused on a cached policy that has changed
        await charge_refusal(identity)  # a refused request still counts toward requests per minute
        raise
    request_ctx.model, request_ctx.stream, request_ctx.shape = model.public_id, call.stream, call.shape
    call, target, plan = _planned(protocol, call, model)
    # admit (a student whose token budget is spent may be served by the fallback model)
    try:
        request_ctx.ticket = await admit(identity, generation=generation, reserve=reservation(
            body_bytes=call.size, max_tokens=target.max_tokens if generates else 0,
            context_length=model.context_length))
    except errors.ApiError as refused:
        model = await budget_fallback(refused, identity, model.public_id)  # or the refusal stands
        request_ctx.model, request_ctx.fallback = model.public_id, "budget"
        call, target, plan = _planned(protocol, call, model)
        request_ctx.ticket = await admit(identity, budgets=False, reserve=reservation(
            body_bytes=call.size, max_tokens=target.max_tokens if generates else 0,
            context_length=model.context_length))
    request_ctx.reached("admitted")
    request_ctx.want = Want(user_id=identity.user_id, pool_id=identity.pool_id, model_id=model.public_id,
                       conversation=conversation_key(user_id=identity.user_id, model_id=model.public_id,
                                                     messages=list(call.opening)) if call.opening else None,
                       prompt_bytes=call.size, weight=identity.fair_weight,
                       pinned_worker=request.headers.get(PIN_HEADER, "")[:100] if identity.is_staff else "")
    return call, plan


def _with_model(call: Call, model_id: str) -> Call:
    return call if call.model == model_id else replace(call, model=model_id)


def _planned(protocol: Protocol, call: Call, model: ModelView) -> tuple[Call, Target, Plan]:
    """The call as sent to `model`: its model id, the output cap the gateway applies, its plan."""
    call = _with_model(call, model.public_id)
    target = Target(max_tokens=output_cap(call.max_tokens, cap=model.max_output_tokens), reasoning=model.reasoning)
    return call, target, protocol.plan(call, target)


def _headers(response: Response, request_ctx: RequestContext) -> None:
    # The API is not served by Django's middleware (ocsweb/asgi.py); HSTS comes from the HTTPS proxy.
    response["X-Content-Type-Options"] = "nosniff"
    if request_ctx.fallback:
        response["x-ocs-fallback"] = request_ctx.fallback  # the answer's `model` names the model that answered
    response["X-Request-Id"] = request_ctx.request_id  # the request log's `request_id`: one request a student can quote
    if request_ctx.staff and request_ctx.worker_name:
        response[PIN_HEADER] = request_ctx.worker_name  # which worker served it: for teachers only
    if request_ctx.ticket is not None:
        for name, value in request_ctx.ticket.headers.items():
            response.setdefault(name, value)


async def end(request_ctx: RequestContext, *, status: int, error_code: str = "") -> None:
    """Where every request ends, once: limits settled, metrics counted, the log row written.
    What live state must learn — the slot if still held, the concurrency leases, the token
    reservation's correction, the fair share's — goes in one round trip (LiveState.finish)."""
    if request_ctx.finished:
        return
    request_ctx.finished = True
    request_ctx.estimate_unreported_usage()
    try:
        await _settle(request_ctx)
    finally:
        REQUESTS.labels(request_ctx.client, request_ctx.model or "-", request_ctx.pool or "-", str(status)).inc()
        for step, seconds in request_ctx.step_durations_s():
            _STEP_HISTOGRAMS[step].observe(seconds)
        if error_code != UNLOGGED_REFUSAL:
            request_ctx.submit(status=status, error_code=error_code)


async def _settle(request_ctx: RequestContext) -> None:
    slot = request_ctx.slot
    # Who frees a slot: dispatch, when it gives up the slot before an answer is handed over (a
    # failure, failover, a refusal or the client leaving); otherwise the request's end (`end()` in
    # inference/pipeline.py), with the rest of the end in one round trip.
    slot_lease = slot.detach() if slot is not None else None
    ticket = (request_ctx.ticket.settlement(request_ctx.served_tokens()) if request_ctx.ticket is not None
              else Settlement())
    fair = Settlement()
    if slot is not None and request_ctx.want is not None:  # it ran: the fair share learns its cost
        usage = request_ctx.usage
        try:
            fair = await fair_settlement(
                request_ctx.want, computed_prompt_tokens=max(0, usage.prompt_tokens - usage.cached_tokens),
                output_tokens=usage.completion_tokens)
        except Exception:
            log.warning("could not work out the fair-share charge of user %s", request_ctx.want.user_id, exc_info=True)
    settlement = Settlement(leases=(slot_lease,) if slot_lease else ()) + ticket + fair
    if not settlement.empty:
        try:
            await live_state().finish(settlement)
        except LiveStateUnavailable:
            log.warning("could not settle request %s in live state: its leases expire by themselves, its "
                        "reservation stands as charged", request_ctx.request_id)
    if slot is not None and slot_lease is not None:
        slot.freed()


async def _stream(plan: Plan, request_ctx: RequestContext, protocol: Protocol) -> Response:
    """Wait briefly for the first chunk so that refusals keep their HTTP status; past the grace
    period, start the event stream and keep the client informed while the request queues."""
    transform = plan.stream_transform() if plan.stream_transform is not None else None
    opening = asyncio.ensure_future(dispatch.open_stream(path=plan.path, body=plan.body, request_ctx=request_ctx,
                                                         protocol=protocol, end_marker=plan.end_marker))
    try:
        done, _ = await asyncio.wait({opening}, timeout=settings.OCS["STREAM_QUEUE_GRACE_S"])
        if not done:
            return event_stream(dispatch.stream_with_keepalive(opening, transform=transform, protocol=protocol,
                                                               request_ctx=request_ctx), request_ctx)
        stream = opening.result()  # a refusal raises here, with its HTTP status
    except BaseException:
        if not opening.done():
            opening.cancel()
            await asyncio.wait({opening}, timeout=5)  # out of the queue before the request ends
        elif not opening.cancelled() and opening.exception() is None:
            await opening.result().close()
        raise
    return event_stream(dispatch.relay(stream, transform), request_ctx)


async def _ended_when_done(chunks: AsyncGenerator[bytes, None], request_ctx: RequestContext) -> AsyncIterator[bytes]:
    """The stream's body; the request ends after its last chunk, or when the client leaves (499,
    with what was delivered), or when the worker failed mid-answer (its error code). A client
    that leaves once the worker's end marker was handed on had the whole answer: 200 (the OpenAI
    SDK closes on `[DONE]`, often before this generator is resumed past its last chunk)."""
    completed = False
    try:
        async with aclosing(chunks) as body:
            async for chunk in body:
                # the answer's first chunk (not a keep-alive sent while it queued)
                if "client_first_byte" not in request_ctx.steps_s and "upstream_first_byte" in request_ctx.steps_s:
                    request_ctx.reached("client_first_byte")
                yield chunk
        completed = True
    finally:
        completed = completed or request_ctx.answer_delivered
        status = 200 if completed else CLIENT_CLOSED
        error_code = request_ctx.stream_error or ("" if completed else "client_closed")
        await end(request_ctx, status=status, error_code=error_code)


def event_stream(chunks: AsyncGenerator[bytes, None], request_ctx: RequestContext) -> Response:
    response = Response(stream=_ended_when_done(chunks, request_ctx), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
