"""The request log: one row per API request, written off the request path.

A view fills a RequestRecord as it learns things (who, which model, which worker, tokens,
timings) and finishes it once the client has its whole answer. Finishing settles the
student's token reservation and appends a row to this process's buffer: no database work on
the request path. A background thread writes the buffer in batches every
OCS_REQUEST_LOG_FLUSH_S; the gateway flushes what is left when it stops (SIGTERM included),
so a clean stop loses nothing and a crash loses at most the last batch. If the database is
unreachable, rows wait in the buffer (bounded) and are written once it is back.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections, connection
from django.utils import timezone

from inference.protocols.base import Shape
from inference.usage import Usage

if TYPE_CHECKING:
    from accounts.key_cache import KeyIdentity
    from inference.admission import Slot, Want
    from inference.quota_gate import Ticket

log = logging.getLogger("ocs.request_log")
MAX_BUFFERED = 200_000


@dataclass
class RequestRecord:
    """One request on its way through inference/pipeline.py: who, what, where it ran, what it
    cost. Filled in along the way; the pipeline's `end()` settles it and `submit`s its row once."""

    client: str
    path: str
    user_agent: str = ""
    tool: str = ""  # inference/client_tools.py
    # Returned to the client as `x-request-id`, so a student can quote one request (lessons' TTFT step).
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    shape: Shape = field(default_factory=Shape)  # what the request carried (inference/protocols/base.py)
    staff: bool = False  # the key belongs to a teacher or operator
    at: datetime = field(default_factory=timezone.now)
    started: float = field(default_factory=time.monotonic)
    user_id: int | None = None
    key_id: int | None = None
    pool: str = ""
    model: str = ""
    stream: bool = False
    worker_id: int | None = None
    worker_name: str = ""
    route_reason: str = ""  # the scheduler's reason for the worker that served it
    first_byte_s: float | None = None
    usage: Usage = field(default_factory=Usage)
    served: bool = False  # a worker answered (tokens may have been generated)
    want: Want | None = None
    ticket: Ticket | None = None
    slot: Slot | None = None  # the worker slot last claimed for it (released by dispatch; end() makes sure)
    stream_error: str = ""  # an error event sent after the 200 (worker died mid-answer, queue timeout)
    # The worker's end marker has been handed on: a client that closes after this point (the
    # OpenAI SDK closes as soon as it reads `data: [DONE]`) had the whole answer.
    answer_delivered: bool = False
    finished: bool = False

    def identify(self, identity: KeyIdentity) -> None:
        self.user_id, self.key_id, self.pool = identity.user_id, identity.key_id, identity.pool_name
        self.staff = identity.is_staff

    def served_by(self, worker_id: int, worker_name: str, first_byte_s: float) -> None:
        self.served = True
        self.worker_id, self.worker_name, self.first_byte_s = worker_id, worker_name, first_byte_s

    def served_tokens(self) -> int | None:
        """Tokens to charge: the worker's count; 0 if no worker answered; None if one answered but
        its count never arrived (a stream cut short), so the reservation stands."""
        if self.usage.reported:
            return self.usage.total
        return None if self.served else 0

    def submit(self, *, status: int, error_code: str = "") -> None:
        """Hand the row to the batch writer (no database work here)."""
        request_log().submit(self.row(status=status, error_code=error_code))

    def row(self, *, status: int, error_code: str) -> dict[str, Any]:
        want = self.want
        return {
            "at": self.at,
            "user_id": self.user_id,
            "key_id": self.key_id,
            "pool": self.pool[:50],
            "model": self.model[:100],
            "worker_id": self.worker_id,
            "worker_name": self.worker_name[:100],
            "route_reason": self.route_reason[:200],
            "client": self.client,
            "user_agent": self.user_agent[:200],
            "tool": self.tool,
            "request_id": self.request_id,
            "tools_n": min(self.shape.tools, 32_767),
            "system_chars": self.shape.system_chars,
            "turns": min(self.shape.turns, 32_767),
            "conversation": (want.conversation or "")[:32] if want else "",
            "path": self.path[:100],
            "stream": self.stream,
            "status": status,
            "error_code": error_code[:50],
            "prompt_tokens": self.usage.prompt_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "queue_wait_ms": round((want.queued_s if want else 0.0) * 1000),
            "ttft_ms": None if self.first_byte_s is None else round(self.first_byte_s * 1000),
            "total_ms": round((time.monotonic() - self.started) * 1000),
            "tokens_per_s": self.usage.predicted_per_second,
            "prompt_tokens_per_s": self.usage.prompt_per_second,
            "retries": len(want.failed) if want else 0,
        }


class RequestLogWriter:
    def __init__(self, flush_every_s: float) -> None:
        self._rows: deque[dict[str, Any]] = deque()
        self._flush_every_s = flush_every_s
        self._lock = threading.Lock()  # one flush at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, row: dict[str, Any]) -> None:
        if len(self._rows) >= MAX_BUFFERED:
            self._rows.popleft()
            log.error("request log buffer full (database unreachable?): dropped the oldest row")
        self._rows.append(row)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="request-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _run(self) -> None:
        while not self._stop.wait(self._flush_every_s):
            self.flush()
        connection.close()

    def flush(self) -> int:
        """Write every buffered row; returns how many. If the database is unreachable the rows
        stay buffered for the next try; a row the database refuses is logged and dropped, so it
        cannot hold back the others."""
        from inference.models import RequestLog

        with self._lock:
            batch = [self._rows.popleft() for _ in range(len(self._rows))]
            if not batch:
                return 0
            close_old_connections()
            try:
                RequestLog.objects.bulk_create([RequestLog(**row) for row in batch], batch_size=500)
                return len(batch)
            except (OperationalError, InterfaceError):
                log.exception("could not write %d request log rows; will retry", len(batch))
                self._rows.extendleft(reversed(batch))
                return 0
            except DatabaseError:
                log.exception("a batch of request log rows was refused; writing them one by one")
            written = 0
            for row in batch:
                try:
                    RequestLog.objects.create(**row)
                    written += 1
                except DatabaseError:
                    log.exception("dropped a request log row the database refuses: %r", row)
            return written

    def close(self) -> int:
        """Stop the thread and write what is left (gateway shutdown); returns rows written."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        return self.flush()

    def pending(self) -> int:
        return len(self._rows)


_writer: RequestLogWriter | None = None


def request_log() -> RequestLogWriter:
    global _writer
    if _writer is None:
        _writer = RequestLogWriter(settings.OCS["REQUEST_LOG_FLUSH_S"])
    return _writer
