"""Slots never leak: a lease stops renewing when its request ends, even when live state fails
at that moment or the request is cancelled between claiming a slot and handing it over."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from core import live
from core.lease import Lease
from core.live import InProcessLiveState, LiveStateUnavailable, worker_resource
from fleet.scheduler import WorkerView
from inference import dispatch, upstream
from inference.admission import Slot, Want
from inference.protocols import openai_chat
from inference.request_context import RequestContext


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FailingRelease(InProcessLiveState):
    """Live state whose release fails, as Redis does while it restarts."""

    async def release(self, resource: str, lease_id: str) -> None:
        raise LiveStateUnavailable("redis is restarting")


def test_a_lease_whose_release_fails_stops_renewing_and_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    state = FailingRelease(clock=clock)
    monkeypatch.setattr(live, "live_state", lambda: state)
    monkeypatch.setattr("inference.admission.live_state", lambda: state)
    monkeypatch.setattr("core.lease.live_state", lambda: state)

    async def scenario() -> int:
        with override_settings(OCS={**settings.OCS, "SLOT_LEASE_S": 0.03}):
            lease_id = await state.claim("w:1", 1, 0.03)
            assert lease_id is not None
            lease = Lease("w:1", lease_id).keep()
            await lease.release()  # logged, not raised: the request still ends cleanly
            await asyncio.sleep(0.05)  # a keeper still running would renew in this time
            assert lease._keeper is not None and lease._keeper.done()
            clock.now += 1.0  # past the lease
            return (await state.busy(["w:1"]))["w:1"]

    assert asyncio.run(scenario()) == 0


WORKER = WorkerView(id=7, name="w7", base_url="http://127.0.0.1:9", pool_id=1, pool_name="production",
                    model_id="m", slots=1, state="healthy")


@pytest.mark.parametrize("where", ["send", "affinity"])
def test_a_cancel_before_the_stream_is_handed_over_frees_the_slot(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    state = InProcessLiveState()
    monkeypatch.setattr("inference.dispatch.live_state", lambda: state)
    monkeypatch.setattr("inference.admission.live_state", lambda: state)
    monkeypatch.setattr("core.lease.live_state", lambda: state)
    reached = asyncio.Event()

    async def acquire_slot(want: Want) -> Slot:
        lease_id = await state.claim(worker_resource(WORKER.id), 1, 30)
        assert lease_id is not None
        return Slot(worker=WORKER, lease=Lease(worker_resource(WORKER.id), lease_id).keep(), reason="test")

    class Answer:
        status_code = 200

        async def aiter_raw(self) -> AsyncIterator[bytes]:
            yield b"data: {}\n\n"

        async def aclose(self) -> None:
            pass

    async def post(url: str, body: dict[str, Any], headers: Any = None) -> Answer:
        if where == "send":
            reached.set()
            await asyncio.sleep(60)
        return Answer()

    async def set_affinity(*args: Any) -> None:
        reached.set()
        await asyncio.sleep(60)

    monkeypatch.setattr(dispatch, "acquire_slot", acquire_slot)
    monkeypatch.setattr(upstream, "post", post)
    monkeypatch.setattr(state, "set_affinity", set_affinity)

    async def scenario() -> int:
        record = RequestContext(client="openai", path="/v1/chat/completions")
        record.want = Want(user_id=1, pool_id=1, model_id="m", conversation="c1")
        task = asyncio.ensure_future(dispatch.open_stream(path="/v1/chat/completions", body={}, record=record,
                                                          protocol=openai_chat.PROTOCOL))
        await asyncio.wait_for(reached.wait(), 5)
        task.cancel()  # the client left
        with pytest.raises(asyncio.CancelledError):
            await task
        return (await state.busy([worker_resource(WORKER.id)]))[worker_resource(WORKER.id)]

    assert asyncio.run(scenario()) == 0


@pytest.mark.parametrize(("ttl_s", "kept"), [(600.0, 7), (0.0, None)])
def test_affinity_is_recorded_for_its_ttl_and_a_ttl_of_zero_turns_it_off(
        monkeypatch: pytest.MonkeyPatch, settings: Any, ttl_s: float, kept: int | None) -> None:
    """OCS_AFFINITY_TTL_S=0 is how a comparison runs without affinity: nothing is recorded (the
    store is not even asked: Redis refuses a zero expiry)."""
    from dataclasses import replace

    state = InProcessLiveState()
    asked: list[float] = []
    recorded = state.set_affinity

    async def set_affinity(conversation: str, worker_id: int, ttl: float) -> None:
        asked.append(ttl)
        await recorded(conversation, worker_id, ttl)

    monkeypatch.setattr(state, "set_affinity", set_affinity)
    monkeypatch.setattr("inference.dispatch.live_state", lambda: state)
    settings.OCS = {**settings.OCS, "AFFINITY_TTL_S": ttl_s}

    async def scenario() -> int | None:
        await dispatch._remember_worker(Want(user_id=1, pool_id=1, model_id="m", conversation="c1"),
                                        replace(WORKER, id=7))
        return (await state.view([7], "c1")).affinity_worker_id

    assert asyncio.run(scenario()) == kept
    assert asked == ([ttl_s] if ttl_s else [])
