"""Two gateway processes behind one address, one database, one Redis: limits, revocation and
worker slots hold across both (the production shape: several gateway processes or hosts).
Only meaningful with Redis: the embedded default is one process by design."""
from __future__ import annotations

import asyncio
import itertools
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings

from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID, Gateway, start_gateway
from tests.integration.test_limits import chat

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not settings.REDIS_URL, reason="several gateway processes share live state only through Redis"),
]


class RoundRobinBalancer:
    """A loopback TCP balancer: each new connection goes to the next backend port."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = itertools.cycle(ports)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", next(self._ports)))
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def two_gateways(transactional_db, tmp_path) -> Iterator[tuple[Gateway, Gateway, RoundRobinBalancer]]:  # noqa: ANN001
    # A key cache TTL far beyond the test: only the Redis invalidation can make revocation work.
    gateways = [start_gateway(tmp_path / f"gateway-{n}.log", OCS_KEY_CACHE_TTL_S="300") for n in (1, 2)]
    balancer = RoundRobinBalancer([g.port for g in gateways])
    yield gateways[0], gateways[1], balancer
    balancer.close()
    for gateway in gateways:
        gateway.process.terminate()
        gateway.process.wait(timeout=10)


def handled_by(gateway: Gateway) -> int:
    return gateway.log().count('"POST /v1/chat/completions')  # daphne and uvicorn access logs alike


def test_a_rate_limit_admits_exactly_k_across_both_gateways(two_gateways, worker) -> None:  # noqa: ANN001
    from accounts.services import key_issue, limits_set, user_ensure

    first, second, balancer = two_gateways
    user, _ = user_ensure(username="scale-rpm", role="student")
    limits_set(target=user, requests_per_minute=5)
    key = key_issue(user=user)[1]
    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = sorted(r.status_code for r in pool.map(lambda _: chat(balancer.url, key), range(12)))
    assert statuses == [200] * 5 + [429] * 7
    assert handled_by(first) >= 5 and handled_by(second) >= 5, "the balancer did not spread the requests"


def test_revocation_refuses_the_very_next_request_in_both_gateways(two_gateways, worker, student_key) -> None:  # noqa: ANN001
    from accounts.services import key_revoke

    first, second, _ = two_gateways
    row, raw = student_key
    assert chat(first.url, raw).status_code == 200 and chat(second.url, raw).status_code == 200  # both cached it
    key_revoke(key=row)
    assert chat(first.url, raw).status_code == 401
    assert chat(second.url, raw).status_code == 401


def test_two_gateways_never_put_more_requests_on_a_worker_than_it_has_slots(two_gateways, llama_server) -> None:  # noqa: ANN001
    from accounts.services import key_issue, user_ensure
    from core.live import live_state, worker_resource
    from fleet.services import worker_register

    _, _, balancer = two_gateways
    worker = worker_register(name="two-slot-worker", base_url=llama_server, model_id=MODEL_ID, pool_name="production",
                             slots=2, context_length=4096, state="healthy", api_key=FIXTURE_WORKER_KEY)
    key = key_issue(user=user_ensure(username="scale-slots", role="student")[0])[1]
    peak = 0
    done = threading.Event()

    def sample() -> None:
        async def watch() -> None:  # one event loop for all samples: the Redis client is bound to it
            nonlocal peak
            while not done.is_set():
                busy = await live_state().busy([worker_resource(worker.id)])
                peak = max(peak, busy[worker_resource(worker.id)])

        asyncio.run(watch())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = list(pool.map(lambda _: chat(balancer.url, key, max_tokens=48).status_code, range(8)))
    finally:
        done.set()
        sampler.join()
    assert statuses == [200] * 8  # the ones that found no slot waited in their gateway's queue
    assert peak == 2
