"""The gateway's process: uvicorn (the default, ocsweb/uvicorn_server.py) or daphne
(OCS_GATEWAY_SERVER=daphne), with an access log that never shows an API key.

`python -m ocsweb.gateway -b 127.0.0.1 -p 8000 ocsweb.asgi:application` starts either; under
daphne it takes all of daphne's own arguments. Copilot's Ollama route carries the key in the URL
path (/ollama/<key>/…), so the access log entries are redacted here: daphne writes its access log
straight to a stream, past Python logging and its filters, hence the generator below; uvicorn's
goes through a logging filter.

It refuses to start (exit 2, the reason on stderr) where it would run beside other gateway
processes without Redis: OCS_GATEWAY_PROCESSES above 1 without REDIS_URL, or, in production
without Redis, a second process on the same host (core/gateway_guard.py).

On SIGTERM or Ctrl-C daphne cancels the requests still running (uvicorn first gives them
UNWIND_GRACE_S to finish), waits until each has unwound (closed its upstream stream, settled its
token budget, handed its request log row to the writer) and stops; the rows still buffered are
then written before the process exits.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import IO

import daphne.cli
import daphne.server
from daphne.access import AccessLogGenerator
from twisted.internet import defer

from core.gateway_guard import AnotherGateway, processes_problem, single_gateway_lock
from core.redact import redact

log = logging.getLogger(__name__)

UNWIND_GRACE_S = 10.0  # how long a stopping gateway waits for its requests to unwind


class RedactingAccessLogGenerator(AccessLogGenerator):
    def write_entry(self, host, date, request, status=None, length=None, ident=None, user=None):  # noqa: ANN001, ANN201
        super().write_entry(host, date, redact(request), status, length, ident, user)


class GracefulServer(daphne.server.Server):
    """Daphne's server, waiting on shutdown for every cancelled request to finish unwinding.

    Daphne 4.2.3 cancels the running applications and waits on `asyncio.gather(*them)`, which
    returns as soon as the first one ends — with CancelledError, as they all do. The reactor then
    stops the loop while the others are still unwinding, and their request log rows are lost
    (seen in CI as rows missing after a SIGTERM under load; tests/ocsweb/test_gateway.py)."""

    def kill_all_applications(self):  # noqa: ANN201
        running = [details["application_instance"] for details in self.connections.values()
                   if not details["application_instance"].done()]
        for instance in running:
            instance.cancel()
        log.info("stopping: cancelled %d running requests", len(running))
        return defer.Deferred.fromFuture(asyncio.ensure_future(_unwound(running)))


async def _unwound(instances: list[asyncio.Future]) -> None:
    _, pending = await asyncio.wait(instances, timeout=UNWIND_GRACE_S) if instances else (set(), set())
    if pending:
        log.warning("stopping: %d requests still unwinding after %.0f s; stopping anyway",
                    len(pending), UNWIND_GRACE_S)
    from inference.upstream import close_sessions

    await close_sessions()


class GatewayCommandLine(daphne.cli.CommandLineInterface):
    server_class = GracefulServer


def refuse_unsafe_start() -> IO[str] | None:
    """Exit with a clear message where this process would run beside others without Redis
    (core/gateway_guard.py). Returns the production lock to hold while serving."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
    from django.conf import settings

    problem = processes_problem(processes=settings.OCS_GATEWAY_PROCESSES, redis_url=settings.REDIS_URL)
    if problem:
        sys.stderr.write(f"gateway refuses to start: {problem}\n")
        raise SystemExit(2)
    if settings.PRODUCTION and not settings.REDIS_URL:
        try:
            return single_gateway_lock(Path(settings.VAR_DIR))
        except AnotherGateway as exc:
            sys.stderr.write(f"gateway refuses to start: {exc}\n")
            raise SystemExit(2) from None
    return None


def main() -> None:
    lock = refuse_unsafe_start()  # noqa: F841 - held open while the server runs
    from django.conf import settings

    try:
        if settings.OCS_GATEWAY_SERVER == "daphne":
            daphne.cli.AccessLogGenerator = RedactingAccessLogGenerator  # the CLI builds its logger from this name
            GatewayCommandLine.entrypoint()
        else:
            from ocsweb.uvicorn_server import serve

            serve(sys.argv[1:], grace_s=UNWIND_GRACE_S)
    finally:
        from inference.request_log import request_log

        written = request_log().close()
        if written:
            print(f"request log: wrote {written} buffered rows on shutdown", flush=True)


if __name__ == "__main__":
    main()
