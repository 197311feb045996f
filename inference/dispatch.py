"""From an authenticated, validated request to a worker's response.

acquire_slot() picks a worker (fleet.scheduler) and claims one of its slots (ocsweb.live),
waiting while all are busy. forward_*() send the request; a worker that fails before the first
byte reaches the client is left out and the request goes to the next one, invisibly to the
client. The slot is released in `finally`, so a client that disconnects frees it at once.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.conf import settings

from fleet.scheduler import WorkerView, rank_workers, serves_model
from fleet.selectors import fleet_snapshot
from inference import errors
from inference.upstream import RETRYABLE_ERRORS, upstream_client
from ocsweb.live import live_state

log = logging.getLogger("ocs.dispatch")

POLL_INTERVAL_S = 0.05


@dataclass
class Slot:
    worker: WorkerView
    lease_id: str
    reason: str
    _keeper: asyncio.Task[None] | None = None

    def start_keeping(self) -> None:
        """Renew the lease while the request runs, so long generations keep their slot."""
        lease_s = settings.OCS["SLOT_LEASE_S"]

        async def keep() -> None:
            while True:
                await asyncio.sleep(lease_s / 3)
                await live_state().renew_slot(self.worker.id, self.lease_id, lease_s)

        self._keeper = asyncio.ensure_future(keep())

    async def release(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
        await live_state().release_slot(self.worker.id, self.lease_id)


@dataclass
class Attempts:
    """Workers this request already failed on, and why (for the log and the final error)."""

    failed: dict[int, str] = field(default_factory=dict)

    def avoid(self) -> frozenset[int]:
        return frozenset(self.failed)


async def ensure_model_visible(*, model_id: str, pool_id: int) -> None:
    snapshot = await fleet_snapshot(pool_id=pool_id)
    if not serves_model(snapshot.workers, model_id=model_id, pool_id=pool_id):
        snapshot = await fleet_snapshot(fresh=True)  # a worker may have registered just now
        if not serves_model(snapshot.workers, model_id=model_id, pool_id=pool_id):
            raise errors.model_not_found(model_id)


async def acquire_slot(*, model_id: str, pool_id: int, attempts: Attempts) -> Slot:
    lease_s = settings.OCS["SLOT_LEASE_S"]
    max_wait_s = settings.OCS["QUEUE_MAX_WAIT_S"]
    started = time.monotonic()
    live = live_state()
    while True:
        snapshot = await fleet_snapshot()
        ids = [w.id for w in snapshot.workers if w.pool_id == pool_id and w.model_id == model_id]
        busy = await live.busy_slots(ids)
        decision = rank_workers(
            workers=snapshot.workers, busy=busy, model_id=model_id, pool_id=pool_id, avoid=attempts.avoid()
        )
        if not decision.ranked:
            if attempts.failed:
                raise errors.upstream_failed("; ".join(attempts.failed.values()))
            raise errors.no_worker_available(model_id)
        for candidate in decision.ranked:
            if candidate.free <= 0:
                continue
            lease_id = await live.claim_slot(candidate.worker.id, candidate.worker.slots, lease_s)
            if lease_id is not None:
                slot = Slot(worker=candidate.worker, lease_id=lease_id, reason=candidate.reason)
                slot.start_keeping()
                return slot
        waited = time.monotonic() - started
        if waited >= max_wait_s:
            raise errors.queue_timeout(model_id, waited, retry_after_s=max(1, int(lease_s // 3)))
        await asyncio.sleep(POLL_INTERVAL_S)


def _worker_failed(attempts: Attempts, slot: Slot, detail: str) -> None:
    attempts.failed[slot.worker.id] = f"{slot.worker.name}: {detail}"
    log.warning("worker %s failed before first byte: %s", slot.worker.name, detail)


async def forward_json(
    *, path: str, body: dict[str, Any], model_id: str, pool_id: int
) -> tuple[int, bytes, WorkerView]:
    """Non-streaming request. Returns (status, body bytes, worker) of a successful answer."""
    attempts = Attempts()
    for _ in range(settings.OCS["UPSTREAM_MAX_TRIES"]):
        slot = await acquire_slot(model_id=model_id, pool_id=pool_id, attempts=attempts)
        try:
            response = await upstream_client().post(slot.worker.base_url + path, json=body)
        except RETRYABLE_ERRORS as exc:
            _worker_failed(attempts, slot, type(exc).__name__)
            continue
        finally:
            await slot.release()
        if response.status_code >= 500:
            _worker_failed(attempts, slot, f"status {response.status_code}")
            continue
        if response.status_code >= 400:
            raise errors.from_llama_server(response.status_code, response.content)
        return response.status_code, response.content, slot.worker
    raise errors.upstream_failed("; ".join(attempts.failed.values()) or "no worker answered")


@dataclass
class OpenStream:
    """An upstream stream whose first chunk has arrived; iterate it to get every chunk."""

    slot: Slot
    response: httpx.Response
    first_chunk: bytes
    chunks: AsyncIterator[bytes]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            yield self.first_chunk
            try:
                async for chunk in self.chunks:
                    yield chunk
            except httpx.HTTPError as exc:
                log.warning("worker %s failed mid-stream: %s", self.slot.worker.name, type(exc).__name__)
                yield sse_error_chunk(
                    errors.upstream_failed(f"the worker stopped mid-answer ({type(exc).__name__}); please retry")
                )
                yield b"data: [DONE]\n\n"
        finally:
            # Runs on normal end, on worker failure and when the client disconnects (the
            # server cancels this generator): close upstream so llama-server stops decoding.
            await self.response.aclose()
            await self.slot.release()


async def open_stream(*, path: str, body: dict[str, Any], model_id: str, pool_id: int) -> OpenStream:
    """Start a streaming request and wait for its first chunk, failing over until one arrives."""
    attempts = Attempts()
    client = upstream_client()
    for _ in range(settings.OCS["UPSTREAM_MAX_TRIES"]):
        slot = await acquire_slot(model_id=model_id, pool_id=pool_id, attempts=attempts)
        response: httpx.Response | None = None
        handed_over = False
        try:
            request = client.build_request("POST", slot.worker.base_url + path, json=body)
            response = await client.send(request, stream=True)
            if response.status_code >= 500:
                await response.aread()
                _worker_failed(attempts, slot, f"status {response.status_code}")
                continue
            if response.status_code >= 400:
                raise errors.from_llama_server(response.status_code, await response.aread())
            chunks = response.aiter_raw()
            first = await anext(chunks, b"")
            if not first:
                _worker_failed(attempts, slot, "closed the stream before the first chunk")
                continue
            handed_over = True
            return OpenStream(slot=slot, response=response, first_chunk=first, chunks=chunks)
        except RETRYABLE_ERRORS as exc:
            _worker_failed(attempts, slot, type(exc).__name__)
            continue
        finally:
            if not handed_over:
                if response is not None:
                    await response.aclose()
                await slot.release()
    raise errors.upstream_failed("; ".join(attempts.failed.values()) or "no worker answered")


def sse_error_chunk(error: errors.ApiError) -> bytes:
    return b"data: " + json.dumps(error.openai_body()).encode() + b"\n\n"
