"""A teacher's key may pin a request to one worker (X-OCS-Worker), which is how verify_path
checks every worker through the gateway; a student's key may not."""
from __future__ import annotations

import httpx
import pytest

from fleet.local_worker import free_port
from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID

pytestmark = pytest.mark.integration

BODY = {"model": MODEL_ID, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def post(gateway, key: str, worker: str) -> httpx.Response:  # noqa: ANN001
    return httpx.post(gateway.url + "/v1/chat/completions", json=BODY, timeout=60,
                      headers={"Authorization": f"Bearer {key}", "X-OCS-Worker": worker})


def test_a_teachers_key_pins_a_worker_and_a_students_does_not(gateway, worker, llama_server, teacher, student_key) -> None:  # noqa: ANN001
    from accounts.services import key_issue
    from fleet.services import worker_register

    worker_register(name="it-twin", base_url=llama_server, model_id=MODEL_ID, pool_name="production", slots=4,
                    context_length=4096, state="healthy", api_key=FIXTURE_WORKER_KEY)
    worker_register(name="it-dead", base_url=f"http://127.0.0.1:{free_port()}", model_id=MODEL_ID,
                    pool_name="production", slots=4, context_length=4096, state="healthy")
    teacher_key = key_issue(user=teacher, name="ops")[1]
    for name in ("it-twin", "it-worker", "it-twin"):
        answer = post(gateway, teacher_key, name)
        assert answer.status_code == 200 and answer.headers["x-ocs-worker"] == name
    dead = post(gateway, teacher_key, "it-dead")
    assert dead.status_code == 502 and "it-dead" in dead.json()["error"]["message"]  # no failover when pinned
    student = post(gateway, student_key[1], "it-dead")
    assert student.status_code == 200 and "x-ocs-worker" not in student.headers  # ignored for students
