"""The gateway's process: daphne, with an access log that never shows an API key.

`python -m ocsweb.gateway -b 127.0.0.1 -p 8000 ocsweb.asgi:application` takes daphne's own
arguments. Daphne writes its access log straight to a stream, past Python logging and its
filters, and Copilot's Ollama route carries the key in the URL path (/ollama/<key>/…), so the
access log entries are redacted here.
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
    daphne.cli.CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
