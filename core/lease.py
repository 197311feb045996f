"""A lease: a claimed unit of capacity in live state (a worker slot, a student's or key's
concurrency), renewed while its request runs and released once, however the request ends.

Renewal is shared: every lease a process holds is renewed by one task per event loop, all in one
round trip every SLOT_LEASE_S / 3 (LiveState.renew_many), instead of a task per lease — three
per request (its slot and two concurrency leases) to create, wake and cancel. A lease is renewed
at least once a third of its life, so it never runs out while held; once released it is no
longer renewed and, if its release could not reach live state, it runs out by itself."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from django.conf import settings

from core.live import LiveStateUnavailable, live_state

log = logging.getLogger("ocs.admission")


class _Renewer:
    """The leases held on one event loop, and the task that renews them."""

    def __init__(self) -> None:
        self.held: dict[int, Lease] = {}
        self.task: asyncio.Task[None] | None = None

    def add(self, lease: Lease) -> None:
        self.held[id(lease)] = lease
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._renew())

    def remove(self, lease: Lease) -> None:
        self.held.pop(id(lease), None)

    async def _renew(self) -> None:
        while self.held:
            lease_s = settings.OCS["SLOT_LEASE_S"]
            await asyncio.sleep(lease_s / 3)
            leases = [(lease.resource, lease.lease_id) for lease in list(self.held.values())]
            if not leases:
                break
            try:
                await live_state().renew_many(leases, lease_s)
            except LiveStateUnavailable:
                pass  # try again next time; the requests themselves go on


_renewers: dict[int, _Renewer] = {}


def _renewer() -> _Renewer:
    loop = asyncio.get_running_loop()
    renewer = _renewers.get(id(loop))
    if renewer is None or (renewer.task is not None and renewer.task.get_loop() is not loop):
        renewer = _renewers[id(loop)] = _Renewer()
    return renewer


def renewing(lease: Lease) -> bool:
    """Whether `lease` is among those renewed (for tests)."""
    return lease._renewer is not None and id(lease) in lease._renewer.held


@dataclass(eq=False)
class Lease:
    """A claimed unit of capacity (a worker slot, a key's concurrency), renewed while held."""

    resource: str
    lease_id: str
    _released: bool = False
    _renewer: _Renewer | None = None

    def keep(self) -> "Lease":
        self._renewer = _renewer()
        self._renewer.add(self)
        return self

    def _stop_renewing(self) -> None:
        if self._renewer is not None:
            self._renewer.remove(self)

    def detach(self) -> tuple[str, str] | None:
        """Stop renewing and hand back (resource, lease id), for the caller to free together with
        the rest of a request's end in one round trip (LiveState.finish); None if already freed."""
        if self._released:
            return None
        self._released = True
        self._stop_renewing()
        return self.resource, self.lease_id

    async def release(self) -> None:
        """Stop renewing, then free. If live state cannot be reached, the lease runs out by
        itself within SLOT_LEASE_S: nothing renews it any more."""
        if self._released:
            return
        self._released = True
        self._stop_renewing()
        try:
            await live_state().release(self.resource, self.lease_id)
        except LiveStateUnavailable:
            log.warning("could not release %s (live state unavailable): it expires by itself", self.resource)
