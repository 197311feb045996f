"""No API key from an /ollama/<key>/ path reaches any log output: Django's own loggers
included, 404s and 500s included, whatever OCS_DEBUG says (issue 9, item 7)."""
from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from core.api_http import Request, Response
from core.keys import generate_key
from core.lean_asgi import LeanApp, Routes
from inference import routes
from ocsweb import probes
from ocsweb.asgi import django_asgi_app  # at import: building it sets Django up, which configures logging anew
from tests.api_client import ApiClient


def _every_handler() -> list[logging.Handler]:
    loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict.values()
                                       if isinstance(logger, logging.Logger)]
    return list({id(h): h for logger in loggers for h in logger.handlers}.values())


@pytest.fixture
def emitted() -> Iterator[list[str]]:
    """The text every configured handler would write, as it would write it: a spy placed after
    each handler's own filters sees only what passes them, after they changed it."""
    lines: list[str] = []

    class Spy(logging.Filter):
        def __init__(self, handler: logging.Handler) -> None:
            super().__init__()
            self.handler = handler

        def filter(self, record: logging.LogRecord) -> bool:
            lines.append(self.handler.format(record))
            return False  # seen; nothing written during the test

    spies = [(handler, Spy(handler)) for handler in _every_handler()]
    for handler, spy in spies:
        handler.addFilter(spy)
    try:
        yield lines
    finally:
        for handler, spy in spies:
            handler.removeFilter(spy)


async def boom(request: Request, key: str) -> Response:
    raise RuntimeError(f"failed while serving key {key}")


def site_with_a_failing_route() -> LeanApp:
    """The gateway's lean path plus one route under /ollama/<key>/ that fails."""
    failing = Routes({}, [(r"/ollama/(?P<key>[^/]+)/boom", boom)])
    return LeanApp(failing + routes.ROUTES + probes.ROUTES, on_error=routes.unhandled, fallback=django_asgi_app)


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True])
def test_a_key_in_an_ollama_path_never_reaches_a_log_line(settings, emitted, debug) -> None:  # noqa: ANN001
    settings.DEBUG = debug
    raw = generate_key().raw
    typo = raw[:-1]
    client = ApiClient(site_with_a_failing_route())
    statuses = [
        client.get(f"/ollama/{raw}/api/tags").status_code,  # an unknown key: 401
        client.get(f"/ollama/{raw}/no/such/route").status_code,  # 404
        client.get(f"/ollama/{raw}/boom").status_code,  # 500, with the key in the exception
        client.get(f"/ollama/{typo}/no/such/route").status_code,
    ]
    assert statuses[2] == 500 and all(status >= 400 for status in statuses)
    logging.getLogger("django.server").info('"GET /ollama/%s/api/tags HTTP/1.1" 404 0', raw)
    logging.getLogger("daphne").warning("request for /ollama/%s/api/show failed", raw)
    assert emitted, "no log output was captured at all"
    assert any("/ollama/" in line for line in emitted)
    leaked = [line for line in emitted if raw in line or typo in line or raw.split("-")[-1] in line]
    assert not leaked, leaked
    assert any("failed while serving key" in line for line in emitted)  # the 500 was logged, redacted
