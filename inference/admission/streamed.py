"""Output charged to the fair share while answers stream, gathered per gateway process: every
stream's charges of the last FLUSH_S go to the live state together, in one round trip.

Why: a stream is charged every STREAM_CHARGE_TOKENS (32) relayed tokens, so that a student's
running answers weigh on their turn while classmates wait (line.py, `charge_streamed`). Sent one
by one, that was a round trip per stream every 32 tokens: one of a short answer's five on
PostgreSQL + Redis, and ~60 for an agent's 2,000-token answer; each costs the gateway's process
CPU (the request's own steps and every stream's chunks share its one core) and held the chunk it
came with until Redis answered. Gathered, a process sends at most one such round trip every
FLUSH_S, whatever its streams, and no chunk waits for one.

Exactness: a charge counts in its request's `want.fair_charged` (what the end's settlement
subtracts) only once the live state has taken it. When a request ends (`settled`), its charges not
sent yet are dropped, as its settlement charges its whole cost, and one on its way is waited for,
so nothing is charged twice or lost. A live state that cannot be reached drops the batch, as a
single charge was dropped before: each request's end settles its whole cost.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.live import LiveStateUnavailable
from inference.admission.live import FairCharge, admission_live

if TYPE_CHECKING:  # annotations only: line.py imports this module
    from inference.admission.line import Want

log = logging.getLogger("ocs.admission")

FLUSH_S = 0.1  # how long a charge may wait to be sent with others: a tenth of a second of turn order


@dataclass(eq=False)
class _Pending:
    want: Want
    policy: str
    amount: float


class StreamedCharges:
    """One event loop's charges not yet sent, and those on their way. Bound to its loop:
    `streamed_charges()` gives one per loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: dict[int, _Pending] = {}  # by id(want): the entry keeps its want alive
        self._sending: dict[int, list[asyncio.Future[None]]] = {}  # by id(want): the flushes carrying its charges
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, want: Want, policy: str, amount: float) -> None:
        """Charge `amount` to the want's student under `policy`, with the next flush."""
        if amount <= 0:
            return
        entry = self._pending.get(id(want))
        if entry is not None and entry.policy != policy:  # the policy changed mid-answer: send the old one now
            self._flush()
            entry = None
        if entry is None:
            self._pending[id(want)] = _Pending(want, policy, amount)
        else:
            entry.amount += amount
        if self._timer is None:
            self._timer = self._loop.call_later(FLUSH_S, self._flush)

    async def settled(self, want: Want) -> None:
        """Before the want's request settles its end: its charges not sent are dropped (the
        settlement charges the whole cost), and the flushes carrying any are waited for."""
        self._pending.pop(id(want), None)
        for sending in list(self._sending.get(id(want), ())):
            await asyncio.shield(sending)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        batch, self._pending = self._pending, {}
        done: asyncio.Future[None] = self._loop.create_future()
        for key in batch:
            self._sending.setdefault(key, []).append(done)
        task = self._loop.create_task(self._send(batch, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: dict[int, _Pending], done: asyncio.Future[None]) -> None:
        try:
            await admission_live().fair_charges([
                FairCharge(line=entry.want.line, policy=entry.policy, student=str(entry.want.user_id),
                           amount=entry.amount)
                for entry in batch.values()])
        except LiveStateUnavailable:
            log.warning("could not charge %d streams' output; their ends settle it", len(batch))
        except Exception:  # noqa: BLE001 - a charge that fails must not leave its requests waiting
            log.exception("streamed charges failed; their ends settle them")
        else:
            for entry in batch.values():
                want = entry.want
                want.fair_policy, want.fair_charged = entry.policy, want.fair_charged + entry.amount
        finally:
            for key in batch:
                flushes = self._sending.get(key, [])
                if done in flushes:
                    flushes.remove(done)
                if not flushes:
                    self._sending.pop(key, None)
            done.set_result(None)


# The running event loop's charges. A gateway process runs one loop; tests run many, one after
# another, and a new loop gets its own (what an ended loop had pending is gone with its requests).
_current: StreamedCharges | None = None


def streamed_charges() -> StreamedCharges:
    global _current
    loop = asyncio.get_running_loop()
    current = _current
    if current is None or current._loop is not loop:
        current = _current = StreamedCharges(loop)
    return current
