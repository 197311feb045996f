from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

from django.conf import settings

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


def test_a_line_logged_while_python_shuts_down_is_still_redacted() -> None:
    """An unclosed connection's __del__ logs at interpreter shutdown (aiohttp's "Unclosed
    connector"); the filter must not fail there (a replacement template imports `re` from C)."""
    script = textwrap.dedent("""
        import logging
        from core.redact import RedactKeysFilter
        handler = logging.StreamHandler()
        handler.addFilter(RedactKeysFilter())
        logging.getLogger().addHandler(handler)
        class Late:
            def __del__(self):
                logging.getLogger("x").error("late ocs-abcdefghij-%s at /ollama/typo/api", "A" * 24)
        keep = Late()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=settings.BASE_DIR)
    assert done.stderr.strip() == "late ocs-abcdefghij-[redacted] at /ollama/[redacted]/api", done.stderr
