"""Fair sharing holds across gateway processes (PostgreSQL + Redis only: the embedded default runs
one process). A student's burst queues on one gateway process; a classmate's question arrives on
another. With one line in Redis the question gets the next free slot; with a queue per process
(before) the first process's pump took every slot it freed itself, and the classmate waited for
the whole burst."""
from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.conf import settings

from core.live import live_state
from tests.conftest import MODEL_ID, start_gateway, wait_for
from tests.integration.test_fleet import PROMPT, client_for, settle

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not settings.REDIS_URL, reason="several gateway processes need Redis")]


def waiting_in(gateway: Any) -> int:  # noqa: ANN401 - tests.conftest.Gateway
    """Requests waiting in the shared line through this gateway process, as it reports them in
    live state (inference/admission/line.py, _publish_queue_depths)."""
    live = live_state()
    depths = live._sync.hgetall(live._k("queue", f"{socket.gethostname()}:{gateway.process.pid}"))
    return sum(int(depth) for depth in depths.values())


def test_a_classmate_on_another_gateway_process_is_not_starved_by_a_burst(
        gateway, worker, student_key, other_student, tmp_path, transactional_db) -> None:  # noqa: ANN001
    from accounts.services import key_issue

    worker.slots = 1
    worker.save(update_fields=["slots"])
    second = start_gateway(tmp_path / "second-gateway.log")
    try:
        settle()
        bob_raw = key_issue(user=other_student)[1]
        served: list[str] = []
        lock = threading.Lock()

        def ask(who: str, url: str, raw_key: str) -> None:
            stream = client_for(url, raw_key).chat.completions.create(
                model=MODEL_ID, messages=PROMPT, max_tokens=12, stream=True)
            chunks = iter(stream)
            next(chunks)  # the first chunk: this request had a slot
            with lock:
                served.append(who)
            for _ in chunks:
                pass

        with ThreadPoolExecutor(max_workers=11) as pool:
            alice = [pool.submit(ask, "alice", gateway.url, student_key[1]) for _ in range(10)]
            # Bob asks once alice's backlog is queued on the first gateway process and being
            # served (a fixed sleep measured the machine's speed: on a quiet one most was served).
            assert wait_for(lambda: len(served) >= 2, timeout_s=60)
            bob = pool.submit(ask, "bob", second.url, bob_raw)
            # Counted from when bob is in the shared line (his process reports him waiting), or
            # served: before that the line cannot rank him, and his way there (authentication,
            # limits, the load's read) takes a loaded machine several of alice's 12-token answers.
            assert wait_for(lambda: "bob" in served or waiting_in(second) > 0, timeout_s=30, interval_s=0.005)
            with lock:
                served_before_bob = served.index("bob") if "bob" in served else len(served)
            for future in alice + [bob]:
                future.result()
    finally:
        second.process.terminate()
        second.process.wait(timeout=10)
    alice_waiting = 10 - served_before_bob
    overtaken = served.index("bob") - served_before_bob
    assert alice_waiting >= 5, f"the backlog drained too fast for the test to mean anything: {served}"
    assert overtaken <= 2, f"{overtaken} of alice's {alice_waiting} waiting requests got the slot before bob"
