"""The uvicorn gateway's own parts: its command line, its access log (keys redacted) and the
choice of server. Starting and stopping it under load is tested in tests/integration."""
from __future__ import annotations

import logging
import subprocess
import sys

from ocsweb.uvicorn_server import ACCESS_LOGGER, RedactAccessLog, access_log_config, parse_args
from tests.conftest import ROOT


def test_it_takes_the_daphne_arguments_the_callers_use() -> None:
    args = parse_args(["-b", "0.0.0.0", "-p", "8002", "--access-log", "/var/log/a.log", "ocsweb.asgi:application"])
    assert (args.host, args.port, args.access_log, args.application) == (
        "0.0.0.0", 8002, "/var/log/a.log", "ocsweb.asgi:application")
    assert parse_args(["ocsweb.asgi:application"]).access_log == "-"  # stdout, as daphne does


def test_the_access_log_never_shows_a_key_in_the_path() -> None:
    raw = "ocs-abcdefgh12-" + "s" * 40
    record = logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "GET", f"/ollama/{raw}/api/tags", "1.1", 200), None)
    assert RedactAccessLog().filter(record)
    line = record.getMessage()
    assert "s" * 40 not in line and "/api/tags" in line and "[redacted]" in line


def test_access_log_targets() -> None:
    assert access_log_config("/dev/null") is None  # off: no handler, no formatting per request
    to_file = access_log_config("/tmp/access.log")
    assert to_file is not None
    handler = to_file["handlers"]["access"]  # type: ignore[index]
    assert handler["class"] == "logging.FileHandler" and handler["filters"] == ["redact"]


def test_an_unknown_server_stops_start_up_with_a_clear_message() -> None:
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "ocsweb.settings",
                                            "OCS_GATEWAY_SERVER": "gunicorn", "OCS_ENV": "test"})
    assert result.returncode != 0 and "OCS_GATEWAY_SERVER='gunicorn' is not a gateway server" in result.stderr


def test_a_request_cancelled_at_the_end_of_the_grace_is_one_warning_line() -> None:
    import asyncio

    from ocsweb.uvicorn_server import QuietShutdownCancel

    try:
        raise asyncio.CancelledError("Task cancelled, timeout graceful shutdown exceeded")
    except asyncio.CancelledError:
        record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application",
                                   None, sys.exc_info())
    assert QuietShutdownCancel().filter(record)
    assert record.levelno == logging.WARNING and record.exc_info is None and "cancelled" in record.getMessage()
    try:
        raise ValueError("a real bug")
    except ValueError:
        bug = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application",
                                None, sys.exc_info())
    assert QuietShutdownCancel().filter(bug) and bug.levelno == logging.ERROR and bug.exc_info is not None
