"""One publisher per server process pushes the fleet view to every teacher watching it.

While at least one fleet page is open in this process, the publisher reads fleet_status() every
PUBLISH_INTERVAL_S (a few small queries and one live-state read, however many teachers watch)
and sends it to this process's group only when something changed. Browsers never poll: they
receive a message when a worker's state, slots, queue, GPU telemetry or the event list change.
With several gateway processes (Redis channel layer) each runs its own publisher for its own
sockets; the group name carries the process id so each page gets one copy.

A worker's state change or move (a WorkerEvent row, from the monitor, an agent, the admin or
these pages) also sends a "fleet.changed" nudge to CHANGES_GROUP when the row is committed: with
Redis, every process's publisher then reads at once instead of at its next tick.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

from channels.layers import get_channel_layer

from portal.fleet_status import fleet_status

log = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 1.0
GROUP = f"fleet.{socket.gethostname()}.{os.getpid()}".replace(":", "-")[:90]
CHANGES_GROUP = "fleet.changes"


class FleetPublisher:
    def __init__(self, interval_s: float = PUBLISH_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.watchers = 0
        self.last: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    async def subscribe(self) -> dict[str, Any]:
        """Count one more watcher (start publishing if first); returns the current view."""
        self.watchers += 1
        current = await fleet_status()
        if self._task is None or self._task.done():
            self.last = current
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run())
        return current

    def unsubscribe(self) -> None:
        self.watchers = max(0, self.watchers - 1)
        if self.watchers == 0 and self._task is not None:
            self._task.cancel()
            self._task = None

    def nudge(self) -> None:
        """Something changed: read now rather than at the next tick (one read for many nudges)."""
        if self._wake is not None:
            self._wake.set()

    async def publish_once(self) -> bool:
        """Read the view; send it if it differs from the last one sent. Returns whether it was sent."""
        current = await fleet_status()
        if current == self.last:
            return False
        self.last = current
        layer = get_channel_layer()
        if layer is not None:
            await layer.group_send(GROUP, {"type": "fleet.status", "status": current})
        return True

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while self.watchers > 0:
            try:
                await asyncio.wait_for(wake.wait(), timeout=self.interval_s)
            except asyncio.TimeoutError:
                pass
            wake.clear()
            try:
                await self.publish_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a database or Redis hiccup must not end the live view
                log.exception("fleet view publisher: a round failed")


publisher = FleetPublisher()


def announce_fleet_change() -> None:
    """Tell every process's publisher that the fleet changed (called after a commit, from sync
    code). Best effort: the periodic read catches anything a lost nudge misses."""
    from asgiref.sync import async_to_sync

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(CHANGES_GROUP, {"type": "fleet.changed"})
    except Exception:
        log.warning("fleet view: could not announce a change", exc_info=True)
