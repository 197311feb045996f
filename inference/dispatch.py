"""Sending an admitted request to a worker, with failover before the first byte.

A worker that fails before anything reached the client (connection refused, 5xx, timeout,
stream closed before its first chunk) is marked suspect in live state, left out for this
request, and the request goes to the next candidate, invisibly to the client. A worker whose
slot is too small for the prompt (llama-server's exceed_context_size_error) is left out too, if
a worker with a larger context serves the model; otherwise the client gets the 400 with both
numbers. Failover is written once, in `_failover`, for whole answers and streams alike.

Who frees a slot: dispatch, when it gives up the slot before an answer is handed over (a
failure, failover, a refusal or the client leaving); otherwise the request's end (`end()` in
inference/pipeline.py), with the rest of the end in one round trip.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from core import errors
from core.live import LiveStateUnavailable, live_state, worker_resource
from fleet.scheduler import ROUTABLE_STATES, WorkerView
from fleet.selectors import fleet_snapshot, usable_pool_ids
from inference import upstream
from inference.admission import shared_prefix, slot_files
from inference.admission.line import Slot, Want, acquire_slot, charge_streamed, rank
from inference.admission.rules import STREAM_CHARGE_TOKENS
from inference.admission.live import admission_live
from inference.prometheus import FIRST_BYTE, count_tokens
from inference.protocols.base import Protocol, StreamTransform
from inference.request_context import RequestContext
from inference.upstream import TRANSPORT_ERRORS, UpstreamResponse
from inference.usage import UsageSniffer

log = logging.getLogger("ocs.dispatch")


LOADING_RETRY_S = 0.5
ANSWER_LIMIT_BYTES = 64 * 1024 * 1024  # a whole (non-streamed) answer; far above any real one
ERROR_LIMIT_BYTES = 64 * 1024  # an error body: its message is all the gateway reads


class AnswerTooLarge(Exception):
    """A worker's answer exceeded the bytes the gateway will read."""


async def read_capped(response: UpstreamResponse, limit: int) -> bytes:
    """The body of a streamed response, refusing to hold more than `limit` bytes of it."""
    parts, size = [], 0
    async for part in response.aiter_raw():
        size += len(part)
        if size > limit:
            if response.status_code >= 400:
                break  # an error's first bytes carry its message
            raise AnswerTooLarge
        parts.append(part)
    return b"".join(parts)


async def _post_whole(url: str, body: dict[str, Any], headers: Mapping[str, str]) -> tuple[int, bytes]:
    """POST and read the whole answer (capped: AnswerTooLarge past ANSWER_LIMIT_BYTES; an error's
    first ERROR_LIMIT_BYTES); the connection is released or closed before it returns."""
    response = await upstream.post(url, body, headers)
    try:
        return response.status_code, await read_capped(
            response, ANSWER_LIMIT_BYTES if response.status_code < 400 else ERROR_LIMIT_BYTES)
    finally:
        await response.aclose()


def _status_detail(status: int) -> str:
    # llama-server answers 503 on every route while it loads its model.
    if status == 503:
        return "still loading its model"
    if status == 401:
        return "refused the gateway's key for it (401: launched with another key)"
    return f"status {status}"


def _worker_fault(status: int) -> bool:
    """The worker's failure, not the request's: the next worker is tried. A 401 is the worker
    refusing its own key (fleet/worker_keys.py), never the student's key, which it never sees."""
    return status >= 500 or status == 401


async def _wait_while_loading(want: Want, slot: Slot) -> None:
    """llama-server answers 503 while it loads its model: not ready, not failed. The worker is
    marked suspect (so a ready one is preferred) and the request waits, within its maximum
    queue wait, instead of failing; past it, a clear "still loading" refusal."""
    await live_state().mark_suspect(slot.worker.id, settings.OCS["SUSPECT_S"])
    if time.monotonic() - want.arrived + LOADING_RETRY_S > settings.OCS["QUEUE_MAX_WAIT_S"]:
        raise errors.ApiError(503, f"The worker for `{want.model_id}` is still loading its model. Try again in a "
                                   "minute.", type="server_error", code="model_loading")
    await asyncio.sleep(LOADING_RETRY_S)


async def _worker_failed(want: Want, slot: Slot, detail: str) -> None:
    want.failed[slot.worker.id] = f"{slot.worker.name}: {detail}"
    log.warning("worker %s failed before the first byte: %s", slot.worker.name, detail)
    await live_state().mark_suspect(slot.worker.id, settings.OCS["SUSPECT_S"])


async def _too_small(want: Want, worker: WorkerView, error: errors.ApiError) -> bool:
    """The worker's slot could not hold the prompt: True (and it is left out for this request)
    when another worker of the model, not tried yet, has a larger context per slot."""
    if error.code != "context_length_exceeded" or not worker.context:
        return False
    snapshot = await fleet_snapshot()
    pools = usable_pool_ids(snapshot, want.pool_id)
    bigger = any(w.model_id == want.model_id and w.pool_id in pools and w.state in ROUTABLE_STATES
                 and w.id not in want.failed and (w.context == 0 or w.context > worker.context)
                 for w in snapshot.workers if w.id != worker.id)
    if bigger:
        want.failed[worker.id] = f"{worker.name}: context of {worker.context} tokens is too small"
        want.min_context = max(want.min_context, worker.context + 1)
    return bigger


# The worker routes where llama-server honours `id_slot` and `cache_prompt`. Its native
# /v1/messages ignores both (checked on the pinned build): that route cannot be isolated by slot,
# and the Anthropic dialect does not return its cache counts (protocols/anthropic.py).
PINNED_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})


def for_slot(path: str, body: dict[str, Any], slot: Slot) -> dict[str, Any]:
    """The body for this very slot: pinned to it, reusing its cache only when the cache holds
    this student's own prompt (inference/admission/slot_owners.py). A foreign slot computes the whole prompt."""
    if slot.index is None or path not in PINNED_ROUTES:
        return body
    return {**body, "id_slot": slot.index, "cache_prompt": slot.own_prefix}


async def _prepare(path: str, slot: Slot, want: Want, body: dict[str, Any]) -> None:
    """A handover of a pinned slot: the previous owner's prompt saved, this student's restored
    (inference/admission/slot_files.py), else their system prompt's public start
    (inference/admission/shared_prefix.py)."""
    if path in PINNED_ROUTES:
        await slot_files.prepare(slot, str(want.user_id))
        await shared_prefix.prepare(slot, str(want.user_id), body)


async def _confirm(path: str, slot: Slot, want: Want) -> None:
    """The worker has processed this prompt in a handed-over slot: it is this student's now
    (inference/admission/slot_owners.py). A failure here only costs the next turn its reuse."""
    if slot.handover and slot.index is not None and path in PINNED_ROUTES:
        slot.handover = False
        try:
            await admission_live().confirm_slot(worker_resource(slot.worker.id), slot.index, student=str(want.user_id),
                                            conversation=want.conversation or "")
        except LiveStateUnavailable:
            log.warning("could not confirm slot %s of %s as its student's", slot.index, slot.worker.name)


class _Exchange:
    """One try on one worker, as failover sees it: what differs between a whole answer and a
    stream. `send` posts and says the status; `error_body` reads a refusal's message; `accept`
    reads the start of a usable answer (None) or says why it is not one; `drop` lets go of what
    `send` opened when the try is abandoned."""

    failures: tuple[type[BaseException], ...] = TRANSPORT_ERRORS

    async def send(self, url: str, body: dict[str, Any], headers: Mapping[str, str]) -> int:
        raise NotImplementedError

    async def error_body(self) -> bytes:
        raise NotImplementedError

    async def accept(self) -> str | None:
        raise NotImplementedError

    async def drop(self) -> None:
        """Nothing to let go of by default."""


class _WholeAnswer(_Exchange):
    failures = (*TRANSPORT_ERRORS, AnswerTooLarge)

    def __init__(self) -> None:
        self.status, self.content = 0, b""
        self.answer: Any = None

    async def send(self, url: str, body: dict[str, Any], headers: Mapping[str, str]) -> int:
        self.status, self.content = await _post_whole(url, body, headers)
        return self.status

    async def error_body(self) -> bytes:
        return self.content

    async def accept(self) -> str | None:
        try:
            self.answer = json.loads(self.content)
        except ValueError:
            self.answer = None
        return None if isinstance(self.answer, dict) else "answered something that is not a JSON object"


class _StreamStart(_Exchange):
    def __init__(self) -> None:
        self.response: UpstreamResponse | None = None
        self.chunks: AsyncIterator[bytes] | None = None
        self.first = b""

    async def send(self, url: str, body: dict[str, Any], headers: Mapping[str, str]) -> int:
        self.response = await upstream.post(url, body, headers)
        return self.response.status_code

    async def error_body(self) -> bytes:
        assert self.response is not None
        return await read_capped(self.response, ERROR_LIMIT_BYTES)

    async def accept(self) -> str | None:
        assert self.response is not None
        self.chunks = self.response.aiter_raw()
        self.first = await anext(self.chunks, b"")
        return None if self.first else "closed the stream before the first chunk"

    async def drop(self) -> None:
        if self.response is not None:
            await self.response.aclose()


async def _failover(*, path: str, body: dict[str, Any], request_ctx: RequestContext,
                    exchange: type[_Exchange]) -> tuple[Slot, _Exchange]:
    """The one failover loop: claim a slot (acquire_slot), prepare it, try its worker, and on a
    failure before the first byte (see the module's docstring) free the slot and try the next,
    up to OCS_UPSTREAM_MAX_TRIES workers. Returns the slot, still held, and the try that worked."""
    want = request_ctx.want
    assert want is not None
    while len(want.failed) < settings.OCS["UPSTREAM_MAX_TRIES"]:
        slot = await acquire_slot(want)
        request_ctx.slot = slot
        request_ctx.reached("slot_claimed")
        attempt = exchange()
        kept = loading = False
        try:
            await _prepare(path, slot, want, body)
            status = await attempt.send(slot.worker.base_url + path, for_slot(path, body, slot),
                                        slot.worker.upstream_headers)
            if status == 503:
                loading = True
                continue
            if _worker_fault(status):
                await _worker_failed(want, slot, _status_detail(status))
                continue
            if status >= 400:
                error = errors.from_llama_server(status, await attempt.error_body())
                if await _too_small(want, slot.worker, error):
                    continue
                raise error
            failure = await attempt.accept()
            if failure:
                await _worker_failed(want, slot, failure)
                continue
            _first_byte(want, request_ctx, slot)
            await _confirm(path, slot, want)
            kept = True
            return slot, attempt
        except attempt.failures as exc:
            await _worker_failed(want, slot, type(exc).__name__)
            continue
        finally:
            if not kept:
                try:
                    await attempt.drop()
                finally:
                    await slot.release()
            if loading:  # (here, not after the loop body: `continue` skips that)
                await _wait_while_loading(want, slot)  # with the slot released: others may use it meanwhile
    raise errors.upstream_failed("; ".join(want.failed.values()) or "no worker answered")


async def forward_json(*, path: str, body: dict[str, Any], request_ctx: RequestContext) -> tuple[int, bytes]:
    """Non-streaming request. Returns (status, body bytes) of a successful answer."""
    _, whole = await _failover(path=path, body=body, request_ctx=request_ctx, exchange=_WholeAnswer)
    assert isinstance(whole, _WholeAnswer) and request_ctx.want is not None
    request_ctx.usage.absorb(whole.answer)
    count_tokens(request_ctx.want.model_id, request_ctx.usage)
    return whole.status, whole.content


def _first_byte(want: Want, request_ctx: RequestContext, slot: Slot) -> None:
    request_ctx.reached("upstream_first_byte")
    elapsed = time.monotonic() - want.arrived
    FIRST_BYTE.labels(want.model_id).observe(elapsed)
    request_ctx.served_by(slot.worker.id, slot.worker.name, elapsed)
    request_ctx.route_reason = slot.reason


class StreamTooLong(Exception):
    """The worker kept streaming past OCS_UPSTREAM_MAX_STREAM_S."""


@dataclass
class OpenStream:
    """An upstream stream whose first chunk has arrived; iterate it to get every chunk."""

    slot: Slot
    response: UpstreamResponse
    first_chunk: bytes
    chunks: AsyncIterator[bytes]
    model_id: str
    request_ctx: RequestContext
    protocol: Protocol
    end_marker: bytes = b""
    usage: UsageSniffer = field(init=False)
    failure: bytes = b""  # the error event for the client, if the worker failed mid-answer
    charged_tokens: int = 0  # output relayed and already charged to the fair share (charge_streamed)
    _closed: bool = False

    def __post_init__(self) -> None:
        self.usage = UsageSniffer(self.request_ctx.usage)  # counts land in the request's log record

    async def __aiter__(self) -> AsyncGenerator[bytes, None]:
        """The worker's chunks as they come. A worker that fails mid-answer (connection lost,
        silent past the read timeout, answering past OCS_UPSTREAM_MAX_STREAM_S, or ending its
        stream without its route's end marker) ends the iteration with `failure` set: the error
        event, in the client's dialect, that relay() sends after the last chunk."""
        deadline = time.monotonic() + settings.OCS["UPSTREAM_MAX_STREAM_S"]
        tail = b""  # the stream's last 64 bytes: where the end marker must be
        try:
            self.usage.feed(self.first_chunk)
            self._note_error(self.first_chunk)
            tail = self._passed(self.first_chunk, b"")
            yield self.first_chunk
            try:
                async for chunk in self.chunks:
                    # Output relayed is charged as it streams, every STREAM_CHARGE_TOKENS, once the
                    # answer goes on past it: not at its last token, where the end's settlement
                    # (one round trip, at once) charges it all; that was a round trip per answer.
                    # The charge goes out with the process's other streams' (admission/streamed.py).
                    due = self.usage.usage.relayed_tokens - self.charged_tokens >= STREAM_CHARGE_TOKENS
                    self.usage.feed(chunk)
                    self._note_error(chunk)
                    tail = self._passed(chunk, tail)
                    if due and not self.usage.usage.reported and not self.request_ctx.answer_delivered:
                        await self._charge_relayed()
                    yield chunk
                    if time.monotonic() > deadline:
                        raise StreamTooLong
            except (*TRANSPORT_ERRORS, StreamTooLong) as exc:
                detail = ("it answered for longer than the gateway allows" if isinstance(exc, StreamTooLong)
                          else f"{type(exc).__name__}")
                await self._fail(f"the worker stopped mid-answer ({detail}); please retry")
                return
            if self.end_marker and self.end_marker not in tail:
                await self._fail("the worker's answer ended early; please retry")
        finally:
            await self.close()

    async def _charge_relayed(self) -> None:
        relayed = self.usage.usage.relayed_tokens
        want = self.request_ctx.want
        if want is not None:
            await charge_streamed(want, output_tokens=relayed - self.charged_tokens)
        self.charged_tokens = relayed

    def _passed(self, chunk: bytes, tail: bytes) -> bytes:
        """The stream's last 64 bytes once `chunk` is handed on; notes the answer as delivered
        when the worker's end marker is among them."""
        tail = chunk[-64:] if len(chunk) >= 64 else (tail + chunk)[-64:]
        if self.end_marker and self.end_marker in tail:
            self.request_ctx.answer_delivered = True
        return tail

    def _note_error(self, chunk: bytes) -> None:
        if b'{"error"' in chunk:  # an error object the worker sent mid-stream: passed on as it is
            self.request_ctx.stream_error = self.request_ctx.stream_error or "upstream_error"

    async def _fail(self, message: str) -> None:
        log.warning("worker %s failed mid-stream: %s", self.slot.worker.name, message)
        self.request_ctx.stream_error = "upstream_error"
        # Blank lines first: the worker may have been cut off in the middle of an event.
        self.failure = b"\n\n" + self.protocol.error_event(errors.upstream_failed(message))
        try:
            await live_state().mark_suspect(self.slot.worker.id, settings.OCS["SUSPECT_S"])
        except Exception:
            log.warning("could not mark worker %s suspect", self.slot.worker.name, exc_info=True)

    async def close(self) -> None:
        """Close upstream (llama-server stops decoding). Idempotent. The slot is the request's
        (request_ctx.slot): its end frees it with the rest, in one round trip (pipeline.end), which
        follows at once: the stream's body ends after this stream's last chunk."""
        await self.response.aclose()
        if not self._closed:
            self._closed = True
            count_tokens(self.model_id, self.usage.usage)


async def open_stream(*, path: str, body: dict[str, Any], request_ctx: RequestContext, protocol: Protocol,
                      end_marker: bytes = b"") -> OpenStream:
    """Start a streaming request and wait for its first chunk, failing over until one arrives."""
    slot, start = await _failover(path=path, body=body, request_ctx=request_ctx, exchange=_StreamStart)
    assert isinstance(start, _StreamStart) and start.response is not None and start.chunks is not None
    assert request_ctx.want is not None
    return OpenStream(slot=slot, response=start.response, first_chunk=start.first, chunks=start.chunks,
                      model_id=request_ctx.want.model_id, request_ctx=request_ctx, protocol=protocol,
                      end_marker=end_marker)


async def relay(stream: OpenStream, transform: StreamTransform | None = None) -> AsyncGenerator[bytes, None]:
    """The response body of a stream whose first chunk has arrived: its chunks, converted by
    `transform` if given (and closed by it once the worker's stream ended normally); closing it
    closes the upstream and frees the slot."""
    async with aclosing(stream.__aiter__()) as chunks:
        async for chunk in chunks:
            if transform is None:
                yield chunk
            else:
                for converted in transform.feed(chunk):
                    yield converted
    if stream.failure:
        yield stream.failure  # already in the client's dialect
    elif transform is not None:
        for converted in transform.end():
            yield converted


async def stream_with_keepalive(
    opening: asyncio.Future[OpenStream], *, transform: StreamTransform | None, protocol: Protocol,
    request_ctx: RequestContext,
) -> AsyncGenerator[bytes, None]:
    """The response body of a streaming request whose worker is not known yet: keep-alives
    while it waits in the queue, then the worker's chunks; a refusal becomes an error event."""
    stream: OpenStream | None = None
    try:
        while not opening.done():
            done, _ = await asyncio.wait({opening}, timeout=settings.OCS["KEEPALIVE_S"])
            if not done:
                yield protocol.keepalive
        try:
            stream = opening.result()
        except errors.ApiError as error:
            request_ctx.stream_error = error.code or error.type
            yield protocol.error_event(error)
            return
        async with aclosing(relay(stream, transform)) as chunks:
            async for chunk in chunks:
                yield chunk
    finally:
        if not opening.done():
            opening.cancel()  # the client left while queued: leave the queue
            # Let it unwind (out of the queue, its wait counted) before the request ends.
            await asyncio.wait({opening}, timeout=5)
        elif stream is None and not opening.cancelled() and opening.exception() is None:
            await opening.result().close()


# A request that needs no generation slot (count_tokens) still costs the worker's tokenizer and
# this process's CPU: at most this many at once per gateway process and model, the rest wait.
LIGHT_CONCURRENCY = 2
_light_gates: dict[tuple[int, str], asyncio.Semaphore] = {}


def _light_gate(model_id: str) -> asyncio.Semaphore:
    key = (id(asyncio.get_running_loop()), model_id)
    gate = _light_gates.get(key)
    if gate is None:
        gate = _light_gates[key] = asyncio.Semaphore(LIGHT_CONCURRENCY)
    return gate


async def forward_light(*, path: str, body: dict[str, Any], request_ctx: RequestContext) -> tuple[int, bytes]:
    """A request that needs no generation slot (tokenizing): the best-ranked worker answers,
    with failover, without claiming a slot; LIGHT_CONCURRENCY at a time per model."""
    assert request_ctx.want is not None
    async with _light_gate(request_ctx.want.model_id):
        return await _forward_light(path=path, body=body, request_ctx=request_ctx)


async def _forward_light(*, path: str, body: dict[str, Any], request_ctx: RequestContext) -> tuple[int, bytes]:
    # Not `_failover`: that loop claims, prepares and frees a slot per try. This request holds
    # none, so it walks the ranking once, and a failure neither marks the worker suspect nor
    # waits for one loading its model (a tokenize is cheap and asks nothing of a slot).
    want = request_ctx.want
    assert want is not None
    decision, _ = await rank(want)
    if not decision.ranked:
        raise errors.no_worker_available(want.model_id)
    for candidate in decision.ranked[: settings.OCS["UPSTREAM_MAX_TRIES"]]:
        worker = candidate.worker
        try:
            status, content = await _post_whole(worker.base_url + path, body, worker.upstream_headers)
        except (*TRANSPORT_ERRORS, AnswerTooLarge) as exc:
            want.failed[worker.id] = f"{worker.name}: {type(exc).__name__}"
            continue
        if _worker_fault(status):
            want.failed[worker.id] = f"{worker.name}: {_status_detail(status)}"
            continue
        if status >= 400:
            raise errors.from_llama_server(status, content)
        request_ctx.reached("upstream_first_byte")
        # counted, not generated: nothing charged
        request_ctx.worker_id, request_ctx.worker_name = worker.id, worker.name
        return status, content
    raise errors.upstream_failed("; ".join(want.failed.values()))
