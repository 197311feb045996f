"""nginx from deploy/nginx/ocs.conf, on loopback, in front of the session's real gateway."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deploy.proxy import RunningNginx, prepare_nginx


@pytest.fixture(scope="module")
def proxy(gateway, tmp_path_factory) -> Iterator[RunningNginx]:  # noqa: ANN001
    prepared = prepare_nginx(tmp_path_factory.mktemp("proxy"), gateway_port=gateway.port)
    running = RunningNginx(prepared)
    try:
        yield running
    finally:
        running.stop()
