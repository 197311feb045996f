"""The request log's background writer outlives a flush that fails in a way it did not foresee
(found in CI: a flush that raised a non-database error ended the thread, and from then on rows
were only written at shutdown)."""
from __future__ import annotations

import atexit
import threading

import pytest

from inference.request_log import RequestLogWriter


def test_the_writer_thread_survives_a_flush_that_raises_and_flushes_again(monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    writer = RequestLogWriter(flush_every_s=0.01)
    calls: list[int] = []
    again = threading.Event()

    def flush() -> int:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("not a database error")
        again.set()
        return 0

    monkeypatch.setattr(writer, "flush", flush)
    writer.submit({"path": "/v1/models"})  # starts the thread
    assert again.wait(5), "the writer stopped after the first failed flush"
    assert writer._thread is not None and writer._thread.is_alive()
    assert "the writer goes on" in caplog.text
    writer._stop.set()
    writer._thread.join(timeout=5)
    writer._rows.clear()  # nothing for its exit-time flush to write into this test's absent database
    atexit.unregister(writer.close)
