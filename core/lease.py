"""A lease: a claimed unit of capacity in live state (a worker slot, a student's or key's
concurrency), renewed while its request runs and released once, however the request ends."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from django.conf import settings

from core.live import LiveStateUnavailable, live_state

log = logging.getLogger("ocs.admission")


@dataclass
class Lease:
    """A claimed unit of capacity (a worker slot, a key's concurrency), renewed while held."""

    resource: str
    lease_id: str
    _keeper: asyncio.Task[None] | None = None
    _released: bool = False

    def keep(self) -> "Lease":
        lease_s = settings.OCS["SLOT_LEASE_S"]

        async def renew_forever() -> None:
            while True:
                await asyncio.sleep(lease_s / 3)
                try:
                    await live_state().renew(self.resource, self.lease_id, lease_s)
                except LiveStateUnavailable:
                    pass  # try again next time; the request itself goes on

        self._keeper = asyncio.ensure_future(renew_forever())
        return self

    async def release(self) -> None:
        """Stop renewing, then free. If live state cannot be reached, the lease runs out by
        itself within SLOT_LEASE_S: nothing renews it any more."""
        if self._released:
            return
        self._released = True
        if self._keeper is not None:
            self._keeper.cancel()
        try:
            await live_state().release(self.resource, self.lease_id)
        except LiveStateUnavailable:
            log.warning("could not release %s (live state unavailable): it expires by itself", self.resource)
