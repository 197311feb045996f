"""The request log: one row per API request, written off the request path.

The pipeline's `end()` hands each request's row (inference/request_context.py) to this
process's buffer: no database work on the request path. A background thread writes the buffer in batches every
OCS_REQUEST_LOG_FLUSH_S; the gateway flushes what is left when it stops (SIGTERM included),
so a clean stop loses nothing and a crash loses at most the last batch. If the database is
unreachable, rows wait in the buffer (bounded) and are written once it is back.
"""
from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections, connection

log = logging.getLogger("ocs.request_log")
MAX_BUFFERED = 200_000


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
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - a failure this writer did not foresee must not end it
                log.exception("the request log's flush failed; the writer goes on")
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
