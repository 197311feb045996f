"""The smallest real path: the official openai SDK -> gateway (uvicorn) -> real llama-server."""
from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from django.conf import settings

from tests.conftest import MODEL_ID

pytestmark = pytest.mark.integration

HELLO = [{"role": "user", "content": "Say hello to the class in one sentence."}]


def client_for(gateway, raw_key: str) -> openai.OpenAI:  # noqa: ANN001
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=raw_key, max_retries=0, timeout=60)


def test_streaming_chat_arrives_in_several_chunks(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = client_for(gateway, student_key[1])
    pieces = []
    # Greedy, on a question whose answer is longer than "Hello." (sampled, the model once said
    # just that, in two pieces, and the test failed for the model's choice, not the stream's).
    count = [{"role": "user", "content": "Count from one to ten in words, separated by commas."}]
    for chunk in client.chat.completions.create(model=MODEL_ID, messages=count, stream=True, max_tokens=24,
                                                temperature=0):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    assert len(pieces) >= 3
    assert "".join(pieces).strip()


def test_stream_ends_with_done_and_is_event_stream(gateway, worker, student_key) -> None:  # noqa: ANN001
    body = {"model": MODEL_ID, "messages": HELLO, "stream": True, "max_tokens": 8}
    headers = {"Authorization": f"Bearer {student_key[1]}"}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[0][6:])["object"] == "chat.completion.chunk"


def test_non_streaming_chat_returns_an_answer_with_usage(gateway, worker, student_key) -> None:  # noqa: ANN001
    reply = client_for(gateway, student_key[1]).chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=16)
    assert reply.choices[0].message.content.strip()
    assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 0


def test_models_lists_what_the_keys_pool_serves(gateway, worker, student_key) -> None:  # noqa: ANN001
    models = client_for(gateway, student_key[1]).models.list()
    assert [m.id for m in models.data] == [MODEL_ID]
    assert models.data[0].model_extra["context_length"] == 4096


def test_bad_missing_and_malformed_keys_raise_authentication_error(gateway, worker, student_key) -> None:  # noqa: ANN001
    for bad in ["ocs-aaaaaaaaaa-" + "A" * 40, "sk-not-ours", student_key[1][:-1] + "#"]:
        with pytest.raises(openai.AuthenticationError) as caught:
            client_for(gateway, bad).chat.completions.create(model=MODEL_ID, messages=HELLO)
        assert caught.value.code == "invalid_api_key"
    missing = httpx.post(gateway.url + "/v1/chat/completions", json={"model": MODEL_ID, "messages": HELLO})
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"


def test_revoked_key_is_refused(gateway, worker, student_key) -> None:  # noqa: ANN001
    from accounts.services import key_revoke

    key, raw = student_key
    client = client_for(gateway, raw)
    client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=2)  # cached in the gateway now
    key_revoke(key=key)
    if settings.REDIS_URL:  # revocation reaches the gateway process through Redis at once
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=2)
        return
    # Embedded default: the revoking process cannot reach the gateway's memory; the cache TTL bounds it.
    # A request *sent* after the TTL (plus a margin for the gateway to read it) must be refused;
    # one sent before may be answered, however long a loaded machine takes to answer it.
    deadline = time.monotonic() + settings.OCS["KEY_CACHE_TTL_S"] + 2
    while True:
        sent = time.monotonic()
        try:
            client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=2)
        except openai.AuthenticationError:
            return
        assert sent < deadline, "revoked key still accepted after the cache TTL"
        time.sleep(0.2)


def test_unknown_model_raises_not_found_error(gateway, worker, student_key) -> None:  # noqa: ANN001
    with pytest.raises(openai.NotFoundError) as caught:
        client_for(gateway, student_key[1]).chat.completions.create(model="gpt-17", messages=HELLO)
    assert caught.value.code == "model_not_found"
    assert "gpt-17" in caught.value.message


def test_malformed_bodies_raise_bad_request_error(gateway, worker, student_key) -> None:  # noqa: ANN001
    client = client_for(gateway, student_key[1])
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL_ID, messages=[])
    assert caught.value.param == "messages"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": 42}])
    headers = {"Authorization": f"Bearer {student_key[1]}", "Content-Type": "application/json"}
    for raw in [b"{not json", b"\xff\xfe", b"[]", b'{"model": "x"}']:
        response = httpx.post(gateway.url + "/v1/chat/completions", content=raw, headers=headers)
        assert response.status_code == 400, raw
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_api_paths_answer_json_never_html(gateway, student_key) -> None:  # noqa: ANN001
    unknown = httpx.get(gateway.url + "/v1/engines")
    assert unknown.status_code == 404 and "error" in unknown.json()
    wrong_method = httpx.get(gateway.url + "/v1/chat/completions")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["message"].startswith("Method GET")
    assert unknown.headers["x-content-type-options"] == wrong_method.headers["x-content-type-options"] == "nosniff"
    too_big = httpx.post(gateway.url + "/v1/chat/completions", content=b"x" * (settings.OCS["MAX_BODY_BYTES"] + 1),
                         headers={"Authorization": f"Bearer {student_key[1]}"})
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "request_too_large"


def test_client_disconnect_releases_the_slot(gateway, worker, student_key) -> None:  # noqa: ANN001
    worker.slots = 1  # one slot: a leaked one would block every later request (429 after 5 s)
    worker.save(update_fields=["slots"])
    time.sleep(settings.OCS["FLEET_CACHE_TTL_S"] + 0.1)
    client = client_for(gateway, student_key[1])
    for _ in range(3):
        stream = client.chat.completions.create(model=MODEL_ID, messages=HELLO, stream=True, max_tokens=3000,
                                                extra_body={"ignore_eos": True})  # would run for seconds
        next(iter(stream))  # the first chunk arrived: the slot is held
        stream.close()  # the student closes the tab
    reply = client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=4)
    assert reply.choices[0].message.content is not None


def test_a_dead_worker_is_failed_over_before_the_first_byte(gateway, worker, student_key) -> None:  # noqa: ANN001
    from fleet.local_worker import free_port
    from fleet.services import worker_register

    # Sorted first among equally loaded workers, so the scheduler tries it first.
    worker_register(name="a-dead-worker", base_url=f"http://127.0.0.1:{free_port()}", model_id=MODEL_ID,
                    pool_name="production", slots=4, state="healthy")
    time.sleep(settings.OCS["FLEET_CACHE_TTL_S"] + 0.1)
    client = client_for(gateway, student_key[1])
    for _ in range(3):
        assert client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=4).choices
        chunks = list(client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=4, stream=True))
        assert chunks


def test_no_routable_worker_gives_a_clear_503_and_readyz_follows(gateway, worker, student_key) -> None:  # noqa: ANN001
    from fleet.services import worker_set_state

    assert httpx.get(gateway.url + "/readyz").status_code == 200
    worker_set_state(worker=worker, state="disabled", reason="test")
    time.sleep(settings.OCS["FLEET_CACHE_TTL_S"] + 0.1)
    with pytest.raises(openai.InternalServerError) as caught:
        client_for(gateway, student_key[1]).chat.completions.create(model=MODEL_ID, messages=HELLO)
    assert caught.value.status_code == 503
    assert caught.value.code == "no_worker_available"
    ready = httpx.get(gateway.url + "/readyz")
    assert ready.status_code == 503 and ready.json()["healthy_workers"] == 0
    assert httpx.get(gateway.url + "/healthz").status_code == 200


def test_the_admin_keeps_djangos_middleware_and_the_hot_paths_skip_it(gateway) -> None:  # noqa: ANN001
    login = httpx.get(gateway.url + "/admin/login/")
    assert login.status_code == 200
    assert login.headers["x-frame-options"] == "DENY" and "csrftoken" in login.cookies
    probe = httpx.get(gateway.url + "/healthz")
    assert probe.status_code == 200 and "x-frame-options" not in probe.headers and not probe.cookies
