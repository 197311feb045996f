"""The gateway's process: daphne, with an access log that never shows an API key.

`python -m ocsweb.gateway -b 127.0.0.1 -p 8000 ocsweb.asgi:application` takes daphne's own
arguments. Daphne writes its access log straight to a stream, past Python logging and its
filters, and Copilot's Ollama route carries the key in the URL path (/ollama/<key>/…), so the
access log entries are redacted here.

On SIGTERM or Ctrl-C daphne cancels the requests still running (each one finishes its request
log record as it unwinds) and stops; the rows still buffered are then written before the
process exits.
"""
from __future__ import annotations

import daphne.cli
from daphne.access import AccessLogGenerator

from ocsweb.lib.redact import redact


class RedactingAccessLogGenerator(AccessLogGenerator):
    def write_entry(self, host, date, request, status=None, length=None, ident=None, user=None):  # noqa: ANN001, ANN201
        super().write_entry(host, date, redact(request), status, length, ident, user)


def main() -> None:
    daphne.cli.AccessLogGenerator = RedactingAccessLogGenerator  # the CLI builds its logger from this name
    try:
        daphne.cli.CommandLineInterface.entrypoint()
    finally:
        from inference.request_log import request_log

        written = request_log().close()
        if written:
            print(f"request log: wrote {written} buffered rows on shutdown", flush=True)


if __name__ == "__main__":
    main()
