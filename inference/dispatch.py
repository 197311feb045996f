"""Sending an admitted request to a worker, with failover before the first byte.

A worker that fails before anything reached the client (connection refused, 5xx, timeout,
stream closed before its first chunk) is marked suspect in live state, left out for this
request, and the request goes to the next candidate, invisibly to the client. A worker whose
slot is too small for the prompt (llama-server's exceed_context_size_error) is left out too, if
a worker with a larger context serves the model; otherwise the client gets the 400 with both
numbers. Slots are released in `finally`, and every await between claiming a slot and handing
it over is inside that protection, so a client that disconnects (or a live-state error) frees
the slot at once; the pipeline's end() releases whatever is still held, as a last guard.
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
from inference.admission.line import Slot, Want, acquire_slot, rank
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
    (inference/admission/slot_files.py), else their system prompt's public start (inference/admission/shared_prefix.py)."""
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


async def forward_json(*, path: str, body: dict[str, Any], record: RequestContext) -> tuple[int, bytes]:
    """Non-streaming request. Returns (status, body bytes) of a successful answer."""
    want = record.want
    assert want is not None
    while len(want.failed) < settings.OCS["UPSTREAM_MAX_TRIES"]:
        slot = await acquire_slot(want)
        record.slot = slot
        answered = False
        try:
            await _prepare(path, slot, want, body)
            status, content = await _post_whole(slot.worker.base_url + path, for_slot(path, body, slot),
                                                slot.worker.upstream_headers)
            answered = status < 400
        except (*TRANSPORT_ERRORS, AnswerTooLarge) as exc:
            await _worker_failed(want, slot, type(exc).__name__)
            continue
        finally:
            if not answered:  # an answer's slot is freed by the request's end (pipeline.end), with the rest
                await slot.release()
        if status == 503:
            await _wait_while_loading(want, slot)
            continue
        if _worker_fault(status):
            await _worker_failed(want, slot, _status_detail(status))
            continue
        if status >= 400:
            error = errors.from_llama_server(status, content)
            if await _too_small(want, slot.worker, error):
                continue
            raise error
        try:
            answer = json.loads(content)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            await slot.release()
            await _worker_failed(want, slot, "answered something that is not a JSON object")
            continue
        _first_byte(want, record, slot)
        await _confirm(path, slot, want)
        record.usage.absorb(answer)
        count_tokens(want.model_id, record.usage)
        return status, content
    raise errors.upstream_failed("; ".join(want.failed.values()) or "no worker answered")


def _first_byte(want: Want, record: RequestContext, slot: Slot) -> None:
    elapsed = time.monotonic() - want.arrived
    FIRST_BYTE.labels(want.model_id).observe(elapsed)
    record.served_by(slot.worker.id, slot.worker.name, elapsed)
    record.route_reason = slot.reason


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
    record: RequestContext
    protocol: Protocol
    end_marker: bytes = b""
    usage: UsageSniffer = field(init=False)
    failure: bytes = b""  # the error event for the client, if the worker failed mid-answer
    _closed: bool = False

    def __post_init__(self) -> None:
        self.usage = UsageSniffer(self.record.usage)  # counts land in the request's log record

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
                    self.usage.feed(chunk)
                    self._note_error(chunk)
                    tail = self._passed(chunk, tail)
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

    def _passed(self, chunk: bytes, tail: bytes) -> bytes:
        """The stream's last 64 bytes once `chunk` is handed on; notes the answer as delivered
        when the worker's end marker is among them."""
        tail = chunk[-64:] if len(chunk) >= 64 else (tail + chunk)[-64:]
        if self.end_marker and self.end_marker in tail:
            self.record.answer_delivered = True
        return tail

    def _note_error(self, chunk: bytes) -> None:
        if b'{"error"' in chunk:  # an error object the worker sent mid-stream: passed on as it is
            self.record.stream_error = self.record.stream_error or "upstream_error"

    async def _fail(self, message: str) -> None:
        log.warning("worker %s failed mid-stream: %s", self.slot.worker.name, message)
        self.record.stream_error = "upstream_error"
        # Blank lines first: the worker may have been cut off in the middle of an event.
        self.failure = b"\n\n" + self.protocol.error_event(errors.upstream_failed(message))
        try:
            await live_state().mark_suspect(self.slot.worker.id, settings.OCS["SUSPECT_S"])
        except Exception:
            log.warning("could not mark worker %s suspect", self.slot.worker.name, exc_info=True)

    async def close(self) -> None:
        """Close upstream (llama-server stops decoding). Idempotent. The slot is the request's
        (record.slot): its end frees it with the rest, in one round trip (pipeline.end), which
        follows at once: the stream's body ends after this stream's last chunk."""
        await self.response.aclose()
        if not self._closed:
            self._closed = True
            count_tokens(self.model_id, self.usage.usage)


async def open_stream(*, path: str, body: dict[str, Any], record: RequestContext, protocol: Protocol,
                      end_marker: bytes = b"") -> OpenStream:
    """Start a streaming request and wait for its first chunk, failing over until one arrives."""
    want = record.want
    assert want is not None
    while len(want.failed) < settings.OCS["UPSTREAM_MAX_TRIES"]:
        slot = await acquire_slot(want)
        record.slot = slot
        response: UpstreamResponse | None = None
        handed_over = False
        loading = False
        try:
            await _prepare(path, slot, want, body)
            response = await upstream.post(slot.worker.base_url + path, for_slot(path, body, slot),
                                           slot.worker.upstream_headers)
            if response.status_code == 503:
                loading = True
                continue
            if _worker_fault(response.status_code):
                await _worker_failed(want, slot, _status_detail(response.status_code))
                continue
            if response.status_code >= 400:
                error = errors.from_llama_server(response.status_code, await read_capped(response, ERROR_LIMIT_BYTES))
                if await _too_small(want, slot.worker, error):
                    continue
                raise error
            chunks = response.aiter_raw()
            first = await anext(chunks, b"")
            if not first:
                await _worker_failed(want, slot, "closed the stream before the first chunk")
                continue
            _first_byte(want, record, slot)
            await _confirm(path, slot, want)
            stream = OpenStream(slot=slot, response=response, first_chunk=first, chunks=chunks,
                                model_id=want.model_id, record=record, protocol=protocol, end_marker=end_marker)
            handed_over = True
            return stream
        except TRANSPORT_ERRORS as exc:
            await _worker_failed(want, slot, type(exc).__name__)
            continue
        finally:
            if not handed_over:
                try:
                    if response is not None:
                        await response.aclose()
                finally:
                    await slot.release()
            if loading:  # (here, not after the loop body: `continue` skips that)
                await _wait_while_loading(want, slot)  # with the slot released: others may use it meanwhile
    raise errors.upstream_failed("; ".join(want.failed.values()) or "no worker answered")


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
    record: RequestContext,
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
            record.stream_error = error.code or error.type
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


async def forward_light(*, path: str, body: dict[str, Any], record: RequestContext) -> tuple[int, bytes]:
    """A request that needs no generation slot (tokenizing): the best-ranked worker answers,
    with failover, without claiming a slot."""
    want = record.want
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
        record.worker_id, record.worker_name = worker.id, worker.name  # counted, not generated: nothing charged
        return status, content
    raise errors.upstream_failed("; ".join(want.failed.values()))
