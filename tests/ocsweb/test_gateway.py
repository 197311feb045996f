"""The gateway process on shutdown: every cancelled request unwinds before the loop stops."""
from __future__ import annotations

import asyncio

import pytest

from ocsweb import gateway
from ocsweb.gateway import GracefulServer


def server_with(instances: list[asyncio.Task]) -> GracefulServer:
    server = GracefulServer.__new__(GracefulServer)  # only its connections matter here
    server.connections = {f"connection-{n}": {"application_instance": task} for n, task in enumerate(instances)}
    return server


async def request(name: str, unwound: list[str], release: asyncio.Event) -> None:
    try:
        await asyncio.Event().wait()  # streaming until the server stops
    finally:
        await release.wait()  # closing its upstream, settling its budget: takes a while
        unwound.append(name)


def test_shutdown_waits_for_the_slowest_request_to_unwind_not_the_first() -> None:
    async def scenario() -> tuple[bool, list[str]]:
        unwound: list[str] = []
        quick, slow = asyncio.Event(), asyncio.Event()
        quick.set()
        tasks = [asyncio.create_task(request("quick", unwound, quick)),
                 asyncio.create_task(request("slow", unwound, slow))]
        await asyncio.sleep(0)
        stopped = asyncio.Event()
        server_with(tasks).kill_all_applications().addBoth(lambda _: stopped.set())
        for _ in range(20):  # plenty of loop turns for the quick one to end
            await asyncio.sleep(0)
        stopped_early = stopped.is_set()
        slow.set()
        await asyncio.wait_for(stopped.wait(), timeout=10)
        return stopped_early, unwound

    stopped_early, unwound = asyncio.run(scenario())
    assert not stopped_early, "the server would stop its loop while a request was still unwinding"
    assert unwound == ["quick", "slow"]


def test_a_request_that_never_unwinds_delays_shutdown_only_by_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway, "UNWIND_GRACE_S", 0.05)

    async def scenario() -> list[str]:
        unwound: list[str] = []
        task = asyncio.create_task(request("stuck", unwound, asyncio.Event()))
        await asyncio.sleep(0)
        stopped = asyncio.Event()
        server_with([task]).kill_all_applications().addBoth(lambda _: stopped.set())
        await asyncio.wait_for(stopped.wait(), timeout=10)
        task.cancel()
        return unwound

    assert asyncio.run(scenario()) == []
