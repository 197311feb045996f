"""Workers only the gateway can use (issue 22, item 4): a real llama-server launched by the rig
agent, as on a rig and in the demo, refuses requests without its key or with another one, while
a student's request through the gateway is served; registering again rotates the key, so the old
one stops working; the key is on no command line and in no log."""
from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest
from django.conf import settings

from fleet.local_worker import free_port
from tests.conftest import MODEL_ID, wait_for
from tests.integration.test_rig_agent import agent_toml, make_rig

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass

ROUTES = (("/completion", {"prompt": "Hi", "n_predict": 2}),
          ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}))


def statuses(base_url: str, key: str | None) -> list[int]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return [httpx.post(base_url + path, json=body, headers=headers, timeout=60).status_code for path, body in ROUTES]


def served_through_the_gateway(gateway_url: str, raw_key: str) -> bool:
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=raw_key, max_retries=0, timeout=60)
    return bool(client.chat.completions.create(model=MODEL_ID, max_tokens=4,
                                               messages=[{"role": "user", "content": "Hi"}]).choices)


def test_a_worker_refuses_requests_without_its_key_while_the_gateways_pass_and_registering_rotates_it(
    gateway, monitor, student_key, transactional_db  # noqa: ANN001
) -> None:
    from fleet.agent.config import parse_agent_config
    from fleet.agent.runner import RigAgentRunner
    from fleet.models import Worker

    _rig, token = make_rig()
    config = parse_agent_config(agent_toml(gateway.url, token, free_port(), name="keyed"))

    def row() -> Worker:
        return Worker.objects.get(name="keyed")

    first = RigAgentRunner(config)
    try:
        assert wait_for(lambda: first.run_round().workers[0]["process_state"] == "running", timeout_s=30)
        assert wait_for(lambda: row().state == "healthy", timeout_s=10)
        worker = row()
        old_key = worker.api_key
        assert old_key.startswith("ocswk-")
        assert statuses(worker.base_url, None) == [401, 401]
        assert statuses(worker.base_url, "ocswk-abcdefghij-" + "x" * 40) == [401, 401]
        assert httpx.get(worker.base_url + "/health", timeout=5).status_code == 200  # the one open route
        assert served_through_the_gateway(gateway.url, student_key[1])

        # On the command line: the file's path, never the key (any user of the rig can read argv).
        supervisor = first.supervisors[0]
        assert supervisor.process is not None and supervisor.process.pid is not None
        argv = Path(f"/proc/{supervisor.process.pid}/cmdline").read_bytes().split(b"\0")
        assert b"--api-key-file" in argv and b"--api-key" not in argv
        assert not any(old_key.encode() in arg for arg in argv)
        assert supervisor.key_path is not None and supervisor.key_path.stat().st_mode & 0o077 == 0
    finally:
        first.stop()

    second = RigAgentRunner(config)  # the agent started again: it registers again
    try:
        assert second.run_round().registered
        new_key = row().api_key
        assert new_key != old_key
        assert wait_for(lambda: second.run_round().workers[0]["process_state"] == "running", timeout_s=30)
        assert wait_for(lambda: row().state == "healthy", timeout_s=10)
        assert statuses(row().base_url, old_key) == [401, 401]
        assert statuses(row().base_url, new_key) == [200, 200]
        assert served_through_the_gateway(gateway.url, student_key[1])
    finally:
        second.stop()
    for log in (gateway.log(), monitor.read_text(errors="replace")):
        assert old_key not in log and new_key not in log


def test_a_worker_refusing_the_gateways_key_is_the_workers_failure_not_the_students(
    gateway, llama_server, student_key, transactional_db  # noqa: ANN001
) -> None:
    """A worker launched with another key than its row holds answers the gateway 401: that is a
    broken worker (the next one is tried), never "invalid API key" for a student whose key is good."""
    from fleet.services import worker_register
    from tests.conftest import FIXTURE_WORKER_KEY

    worker_register(name="stale-key", base_url=llama_server, model_id=MODEL_ID, pool_name="production", slots=4,
                    context_length=4096, state="healthy", api_key="ocswk-abcdefghij-" + "s" * 40)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=student_key[1], max_retries=0, timeout=60)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=MODEL_ID, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
    assert caught.value.status_code == 502 and "401" in caught.value.message
    worker_register(name="good-key", base_url=llama_server, model_id=MODEL_ID, pool_name="production", slots=4,
                    context_length=4096, state="healthy", api_key=FIXTURE_WORKER_KEY)
    time.sleep(settings.OCS["FLEET_CACHE_TTL_S"] + 0.2)  # the gateway's fleet snapshot catches up
    assert served_through_the_gateway(gateway.url, student_key[1])  # the failing worker is passed over
