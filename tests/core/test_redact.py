from __future__ import annotations

import logging

from core.keys import generate_key
from core.redact import RedactKeysFilter, redact


def test_redact_keeps_prefix_and_removes_secret_everywhere() -> None:
    key = generate_key()
    text = f"GET /ollama/{key.raw}/api/tags Authorization: Bearer {key.raw}"
    cleaned = redact(text)
    assert key.raw not in cleaned
    assert cleaned.count(f"ocs-{key.prefix}-[redacted]") == 2


def test_log_filter_redacts_message_arguments_and_exception_text() -> None:
    key = generate_key()
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "bad key %s", (key.raw,), None)
    try:
        raise ValueError(f"boom {key.raw}")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    RedactKeysFilter().filter(record)
    assert key.raw not in record.getMessage()
    assert key.raw not in (record.exc_text or "")


def test_a_workers_key_and_a_rig_token_are_redacted_too() -> None:
    from core.keys import RIG_SCHEME, WORKER_SCHEME

    for scheme in (WORKER_SCHEME, RIG_SCHEME):
        key = generate_key(scheme)
        cleaned = redact(f"POST http://100.64.0.12:8080/completion Authorization: Bearer {key.raw}")
        assert key.raw not in cleaned and f"{scheme}-{key.prefix}-[redacted]" in cleaned
