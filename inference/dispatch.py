"""Sending an admitted request to a worker, with failover before the first byte.

A worker that fails before anything reached the client (connection refused, 5xx, timeout,
stream closed before its first chunk) is marked suspect in live state, left out for this
request, and the request goes to the next candidate, invisibly to the client. Slots are
released in `finally`, so a client that disconnects frees its slot at once.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.conf import settings

from fleet.scheduler import WorkerView, serves_model
from fleet.selectors import fleet_snapshot, usable_pool_ids
from inference import errors, upstream
from inference.admission import Slot, Want, acquire_slot, rank
from inference.dialects import OPENAI, Dialect
from inference.metrics import FIRST_BYTE, count_tokens
from inference.upstream import RETRYABLE_ERRORS, upstream_client
from inference.request_log import RequestRecord
from inference.usage import UsageSniffer, usage_of
from ocsweb.live import live_state

log = logging.getLogger("ocs.dispatch")


async def ensure_model_visible(*, model_id: str, pool_id: int) -> None:
    snapshot = await fleet_snapshot(pool_id=pool_id)
    if not serves_model(snapshot.workers, model_id=model_id, pool_ids=usable_pool_ids(snapshot, pool_id)):
        snapshot = await fleet_snapshot(fresh=True)  # a worker may have registered just now
        if not serves_model(snapshot.workers, model_id=model_id, pool_ids=usable_pool_ids(snapshot, pool_id)):
            raise errors.model_not_found(model_id)


def _status_detail(status: int) -> str:
    # llama-server answers 503 on every route while it loads its model.
    return "still loading its model" if status == 503 else f"status {status}"


async def _worker_failed(want: Want, slot: Slot, detail: str) -> None:
    want.failed[slot.worker.id] = f"{slot.worker.name}: {detail}"
    log.warning("worker %s failed before the first byte: %s", slot.worker.name, detail)
    await live_state().mark_suspect(slot.worker.id, settings.OCS["SUSPECT_S"])


async def _remember_worker(want: Want, worker: WorkerView) -> None:
    if want.conversation:
        await live_state().set_affinity(want.conversation, worker.id, settings.OCS["AFFINITY_TTL_S"])


async def forward_json(
    *, path: str, body: dict[str, Any], want: Want, record: RequestRecord
) -> tuple[int, bytes, WorkerView]:
    """Non-streaming request. Returns (status, body bytes, worker) of a successful answer."""
    for _ in range(settings.OCS["UPSTREAM_MAX_TRIES"]):
        slot = await acquire_slot(want)
        try:
            request = upstream_client().build_request("POST", slot.worker.base_url + path, json=body)
            response = await upstream.send(request, stream=False)
        except RETRYABLE_ERRORS as exc:
            await _worker_failed(want, slot, type(exc).__name__)
            continue
        finally:
            await slot.release()
        if response.status_code >= 500:
            await _worker_failed(want, slot, _status_detail(response.status_code))
            continue
        if response.status_code >= 400:
            raise errors.from_llama_server(response.status_code, response.content)
        await _remember_worker(want, slot.worker)
        _first_byte(want, record, slot.worker)
        record.usage = usage_of(response.content)
        count_tokens(want.model_id, record.usage)
        return response.status_code, response.content, slot.worker
    raise errors.upstream_failed("; ".join(want.failed.values()) or "no worker answered")


def _first_byte(want: Want, record: RequestRecord, worker: WorkerView) -> None:
    elapsed = time.monotonic() - want.arrived
    FIRST_BYTE.labels(want.model_id).observe(elapsed)
    record.served_by(worker.id, worker.name, elapsed)


@dataclass
class OpenStream:
    """An upstream stream whose first chunk has arrived; iterate it to get every chunk."""

    slot: Slot
    response: httpx.Response
    first_chunk: bytes
    chunks: AsyncIterator[bytes]
    model_id: str
    record: RequestRecord
    dialect: Dialect = OPENAI
    usage: UsageSniffer = field(init=False)
    _closed: bool = False

    def __post_init__(self) -> None:
        self.usage = UsageSniffer(self.record.usage)  # counts land in the request's log record

    async def __aiter__(self) -> AsyncGenerator[bytes, None]:
        try:
            self.usage.feed(self.first_chunk)
            yield self.first_chunk
            try:
                async for chunk in self.chunks:
                    self.usage.feed(chunk)
                    yield chunk
            except httpx.HTTPError as exc:
                log.warning("worker %s failed mid-stream: %s", self.slot.worker.name, type(exc).__name__)
                await live_state().mark_suspect(self.slot.worker.id, settings.OCS["SUSPECT_S"])
                self.record.stream_error = "upstream_error"
                yield self.dialect.error_event(
                    errors.upstream_failed(f"the worker stopped mid-answer ({type(exc).__name__}); please retry")
                )
        finally:
            await self.close()

    async def close(self) -> None:
        """Close upstream (llama-server stops decoding) and free the slot. Idempotent."""
        await self.response.aclose()
        await self.slot.release()
        if not self._closed:
            self._closed = True
            count_tokens(self.model_id, self.usage.usage)


async def open_stream(
    *, path: str, body: dict[str, Any], want: Want, record: RequestRecord, dialect: Dialect = OPENAI
) -> OpenStream:
    """Start a streaming request and wait for its first chunk, failing over until one arrives."""
    client = upstream_client()
    for _ in range(settings.OCS["UPSTREAM_MAX_TRIES"]):
        slot = await acquire_slot(want)
        response: httpx.Response | None = None
        handed_over = False
        try:
            request = client.build_request("POST", slot.worker.base_url + path, json=body)
            response = await upstream.send(request, stream=True)
            if response.status_code >= 500:
                await response.aread()
                await _worker_failed(want, slot, _status_detail(response.status_code))
                continue
            if response.status_code >= 400:
                raise errors.from_llama_server(response.status_code, await response.aread())
            chunks = response.aiter_raw()
            first = await anext(chunks, b"")
            if not first:
                await _worker_failed(want, slot, "closed the stream before the first chunk")
                continue
            handed_over = True
            await _remember_worker(want, slot.worker)
            _first_byte(want, record, slot.worker)
            return OpenStream(slot=slot, response=response, first_chunk=first, chunks=chunks,
                              model_id=want.model_id, record=record, dialect=dialect)
        except RETRYABLE_ERRORS as exc:
            await _worker_failed(want, slot, type(exc).__name__)
            continue
        finally:
            if not handed_over:
                if response is not None:
                    await response.aclose()
                await slot.release()
    raise errors.upstream_failed("; ".join(want.failed.values()) or "no worker answered")


Transform = Callable[[bytes], Iterator[bytes]]


async def relay(stream: OpenStream, transform: Transform | None = None) -> AsyncGenerator[bytes, None]:
    """The response body of a stream whose first chunk has arrived: its chunks, converted by
    `transform` if given; closing it closes the upstream and frees the slot."""
    async with aclosing(stream.__aiter__()) as chunks:
        async for chunk in chunks:
            if transform is None:
                yield chunk
            else:
                for converted in transform(chunk):
                    yield converted


async def stream_with_keepalive(
    opening: asyncio.Task[OpenStream], *, transform: Transform | None = None, dialect: Dialect = OPENAI,
    record: RequestRecord,
) -> AsyncGenerator[bytes, None]:
    """The response body of a streaming request whose worker is not known yet: keep-alives
    while it waits in the queue, then the worker's chunks; a refusal becomes an error event."""
    stream: OpenStream | None = None
    try:
        while not opening.done():
            done, _ = await asyncio.wait({opening}, timeout=settings.OCS["KEEPALIVE_S"])
            if not done:
                yield dialect.keepalive
        try:
            stream = opening.result()
        except errors.ApiError as error:
            record.stream_error = error.code or error.type
            yield dialect.error_event(error)
            return
        async with aclosing(relay(stream, transform)) as chunks:
            async for chunk in chunks:
                yield chunk
    finally:
        if not opening.done():
            opening.cancel()  # the client left while queued: leave the queue
        elif stream is None and not opening.cancelled() and opening.exception() is None:
            await opening.result().close()


async def forward_light(*, path: str, body: dict[str, Any], want: Want) -> tuple[int, bytes]:
    """A request that needs no generation slot (tokenizing): the best-ranked worker answers,
    with failover, without claiming a slot."""
    decision = await rank(want)
    if not decision.ranked:
        raise errors.no_worker_available(want.model_id)
    for candidate in decision.ranked[: settings.OCS["UPSTREAM_MAX_TRIES"]]:
        worker = candidate.worker
        try:
            request = upstream_client().build_request("POST", worker.base_url + path, json=body)
            response = await upstream.send(request, stream=False)
        except RETRYABLE_ERRORS as exc:
            want.failed[worker.id] = f"{worker.name}: {type(exc).__name__}"
            continue
        if response.status_code >= 500:
            want.failed[worker.id] = f"{worker.name}: {_status_detail(response.status_code)}"
            continue
        if response.status_code >= 400:
            raise errors.from_llama_server(response.status_code, response.content)
        return response.status_code, response.content
    raise errors.upstream_failed("; ".join(want.failed.values()))
