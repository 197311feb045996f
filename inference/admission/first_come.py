"""First come, first served on the way to a worker: at most OCS_ADMISSION_AT_ONCE requests of a
gateway process are in their admission (authentication, checks, limits) at once, and as many in
their first claim of a slot; the others wait their turn in the order they came.

Why: on PostgreSQL + Redis each of those steps waits for a live-state round trip, and a waiting
request goes to the back of the event loop's queue. When a class's requests arrive together (a
teacher says "ask now"; the benchmark's streams run in step), every request's admission then
shares the loop with all the others' (processor sharing), and each reaches its worker only when
nearly all of them have: the burst's first request is as late as its last. The embedded back end
rarely waits inside these steps (a reload of the key cache or of the fleet), so its burst is served
nearly in order. With a bound, the first requests of a burst finish these
steps first while the rest have not started; their round trips are shorter too, as fewer requests
compete for the loop (docs/performance.md, "First come, first served"). The bound is per step,
not for the whole way, so that requests still overlap their round trips: 8 measured best here at
32 streams; at 128, where a process is CPU-bound, it costs the Redis back end ~6 % (measured there).

No limit is checked or charged by it; a request that gives up while waiting leaves the line.
"""
from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType

from django.conf import settings


class FirstCome:
    """An asynchronous context manager: at most `limit` holders at once (0: no bound), the others
    let in in the order they asked. Bound to one event loop: `first_come` gives one per loop."""

    __slots__ = ("limit", "held", "waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def __aenter__(self) -> None:
        if self.limit <= 0:
            return
        if self.held < self.limit and not self.waiting:
            self.held += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn  # a holder that left handed its place on (`held` unchanged)
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._leave()  # handed the place as it gave up: pass it on
            else:
                self.waiting.remove(turn)
            raise

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        if self.limit > 0:
            self._leave()

    def _leave(self) -> None:
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.held -= 1


# The running event loop's lines. A gateway process runs one loop; tests run many, one after
# another, and a new loop gets new lines (a request still in an old one leaves its own).
_current: tuple[asyncio.AbstractEventLoop, dict[str, FirstCome]] | None = None


def first_come(step: str) -> FirstCome:
    """This event loop's line for `step` ("admission", "claim"), OCS_ADMISSION_AT_ONCE at once."""
    global _current
    loop = asyncio.get_running_loop()
    current = _current
    if current is None or current[0] is not loop:
        current = _current = (loop, {})
    gate = current[1].get(step)
    if gate is None:
        gate = current[1][step] = FirstCome(settings.OCS["ADMISSION_AT_ONCE"])
    return gate
