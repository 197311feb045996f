"""The gateway on uvicorn (uvloop event loop, httptools HTTP parser): the production default,
chosen by `manage.py bench_gateway` (docs/performance.md). Daphne stays supported
(OCS_GATEWAY_SERVER=daphne, ocsweb/gateway.py).

It takes the subset of daphne's arguments this project uses, so every caller (the demo, the
systemd unit, the tests) starts either server the same way:

    python -m ocsweb.gateway -b HOST -p PORT [--access-log PATH|-] ocsweb.asgi:application

Behaviour kept from the daphne gateway:
- the access log never shows an API key (Copilot's Ollama route carries it in the path);
- what it reads from a client is bounded (header size and count, header and body read
  timeouts, a body deadline, a connection cap: ocsweb/read_bounds.py), as nginx bounds it in front;
- no proxy-header rewriting by the server: the application decides which proxies it trusts
  (core/client_address.py), as it does under daphne;
- on SIGTERM or Ctrl-C the requests still running get UNWIND_GRACE_S to finish, then are
  cancelled; asyncio.run then waits for each to unwind (free its slot, settle its budget, hand
  its log row to the writer) before the process writes the buffered rows and exits.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

from core.redact import redact
from ocsweb.read_bounds import bounded_protocol, read_bounds_from_env

ACCESS_LOGGER = "uvicorn.access"


class RedactAccessLog(logging.Filter):
    """uvicorn's access record is '%s - "%s %s HTTP/%s" %d' with the path as its third argument."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        return True


class QuietShutdownCancel(logging.Filter):
    """uvicorn logs each request it cancels at the end of the shutdown grace as "Exception in
    ASGI application" with a CancelledError traceback. It is the expected end of a stream that
    outlived the grace (its row is still written): one warning line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            record.msg, record.args, record.exc_info, record.exc_text = (
                "stopping: cancelled a request still running after the shutdown grace", None, None, None)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ocsweb.gateway",
                                     description="The gateway on uvicorn (OCS_GATEWAY_SERVER=uvicorn).")
    parser.add_argument("-b", "--bind", dest="host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=8000)
    parser.add_argument("--access-log", default="-", help="a file, '-' for stdout (the default), /dev/null for none")
    parser.add_argument("application", help="the ASGI application, e.g. ocsweb.asgi:application")
    return parser.parse_args(argv)


def access_log_config(target: str) -> dict[str, object] | None:
    """uvicorn's logging configuration for `target`; None when access logging is off."""
    if target in {"/dev/null", "nul"}:
        return None
    handler: dict[str, object] = ({"class": "logging.StreamHandler", "stream": "ext://sys.stdout"} if target == "-"
                                  else {"class": "logging.FileHandler", "filename": target})
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": {"()": RedactAccessLog}},
        "formatters": {"access": {"format": "%(asctime)s %(message)s"}},
        "handlers": {"access": {**handler, "formatter": "access", "filters": ["redact"]}},
        "loggers": {ACCESS_LOGGER: {"handlers": ["access"], "level": "INFO", "propagate": False}},
    }


class GatewayServer(uvicorn.Server):
    """uvicorn's server without its last step: after a graceful stop it raises the stop signal
    again so that the process dies of it. The gateway still has its buffered request log rows
    to write (ocsweb/gateway.py), and then exits normally."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets=sockets)
        from inference.upstream import close_sessions

        await close_sessions()

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self.handle_exit(sig, frame)
        self._captured_signals.clear()  # handled: nothing to raise again afterwards


def serve(argv: list[str], *, grace_s: float) -> None:
    args = parse_args(argv)
    log_config = access_log_config(args.access_log)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s",
                        stream=sys.stderr)
    logging.getLogger("uvicorn.error").addFilter(QuietShutdownCancel())
    bounds = read_bounds_from_env()
    config = uvicorn.Config(
        args.application, host=args.host, port=args.port,
        loop="uvloop", http=bounded_protocol(bounds), ws="websockets-sansio",
        limit_concurrency=bounds.max_connections,
        lifespan="off",  # Django's handler answers HTTP and WebSocket scopes only
        proxy_headers=False,
        access_log=log_config is not None, log_config=log_config,
        timeout_graceful_shutdown=int(grace_s),
    )
    GatewayServer(config).run()
