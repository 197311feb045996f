"""The fleet snapshot the hot path reads: reloaded once per expiry however many requests arrive."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fleet import selectors
from fleet.selectors import FleetSnapshot


def _counting_loader(monkeypatch: pytest.MonkeyPatch, delay_s: float = 0.05) -> list[int]:
    calls: list[int] = []
    lock = threading.Lock()

    def load() -> FleetSnapshot:
        with lock:
            calls.append(1)
        time.sleep(delay_s)  # a database read, in a pool thread
        return FleetSnapshot(workers=[], models={}, pool_ids=frozenset({1}), lending_pool_ids=frozenset(),
                             taken_at=time.monotonic())

    monkeypatch.setattr(selectors, "_load_snapshot", load)
    monkeypatch.setattr(selectors, "_snapshot", None)
    monkeypatch.setattr(selectors, "_loading", None)
    return calls


def test_requests_arriving_while_the_snapshot_reloads_share_one_reload(monkeypatch: pytest.MonkeyPatch,
                                                                      settings) -> None:  # noqa: ANN001
    settings.OCS = {**settings.OCS, "FLEET_CACHE_TTL_S": 0.2}
    calls = _counting_loader(monkeypatch)

    async def burst() -> list[FleetSnapshot]:
        return await asyncio.gather(*(selectors.fleet_snapshot() for _ in range(50)))

    first = asyncio.run(burst())
    assert len(calls) == 1 and all(s is first[0] for s in first)
    time.sleep(0.25)  # expired
    second = asyncio.run(burst())
    assert len(calls) == 2 and all(s is second[0] for s in second) and second[0] is not first[0]


def test_a_forced_reload_does_not_join_one_already_running(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting_loader(monkeypatch)

    async def both() -> None:
        running = asyncio.ensure_future(selectors.fleet_snapshot())
        await asyncio.sleep(0.01)  # its database read has started
        await selectors.fleet_snapshot(fresh=True)  # after a miss: must read again
        await running

    asyncio.run(both())
    assert len(calls) == 2


def test_a_cancelled_waiter_leaves_the_reload_for_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting_loader(monkeypatch)

    async def scenario() -> FleetSnapshot:
        leaving = asyncio.ensure_future(selectors.fleet_snapshot())
        staying = asyncio.ensure_future(selectors.fleet_snapshot())
        await asyncio.sleep(0.01)
        leaving.cancel()
        return await staying

    snapshot = asyncio.run(scenario())
    assert len(calls) == 1 and selectors._snapshot is snapshot
