"""Every token counted and charged, on whichever back end the suite runs: a stream the client cuts
is logged and charged for what it delivered (not 0, not the whole reservation), and the student's
budget counter says the same as the request log; a body far larger than the model's context is
refused before any worker sees it; count_tokens takes a few at a time and counts toward the
requests per minute; a hog's running streams weigh on their turn while a classmate waits.
Against the real gateway and llama-server (the hog and the cut), or a recording stand-in."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from fleet.local_worker import free_port
from inference.admission.rules import prompt_tokens_estimate
from tests.conftest import MODEL_ID, Gateway, start_gateway, stop_process, wait_for
from tests.integration.test_limits import limited_key

pytestmark = pytest.mark.integration

LONG_ANSWER = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def body_bytes(**body: object) -> bytes:
    return json.dumps(body).encode()


def content_events(raw: bytes) -> int:
    return sum(1 for line in raw.split(b"\n") if line.startswith(b"data: {") and b'"content":"' in line
               and b'"content":""' not in line)


def row_of(user_agent: str):  # noqa: ANN201
    from inference.models import RequestLog

    return wait_for(lambda: RequestLog.objects.filter(user_agent=user_agent).first(), 20)


def test_a_cut_stream_is_logged_and_charged_for_what_it_delivered_and_the_budget_agrees(gateway, worker) -> None:  # noqa: ANN001
    key = limited_key("cutter", tokens_per_day=1_000_000)
    agent = f"cutter-{time.monotonic_ns()}"
    body = body_bytes(model=MODEL_ID, stream=True, max_tokens=400, ignore_eos=True, messages=LONG_ANSWER)
    received = b""
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", content=body, timeout=120,
                      headers={"Authorization": f"Bearer {key}", "User-Agent": agent,
                               "Content-Type": "application/json"}) as answer:
        for chunk in answer.iter_raw():
            received += chunk
            if content_events(received) >= 40:
                break  # the student pressed Esc
    read = content_events(received)
    row = row_of(agent)
    assert (row.status, row.error_code, row.usage_estimated) == (499, "client_closed", True)
    # What the client received, within the few tokens in flight when it left; not 0.
    assert read <= row.completion_tokens <= read + 12
    assert row.prompt_tokens == prompt_tokens_estimate(len(body))
    # The budget counter holds what the log says, not the 400-token reservation.
    probe = body_bytes(model=MODEL_ID, max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    after = httpx.post(gateway.url + "/v1/chat/completions", content=probe, timeout=60,
                       headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    assert after.status_code == 200
    reserved_for_probe = min(len(probe) + 1, 4096)
    used_before_probe = 1_000_000 - int(after.headers["x-ratelimit-remaining-tokens"]) - reserved_for_probe
    assert used_before_probe == row.prompt_tokens + row.completion_tokens


@pytest.fixture(scope="module")
def patient_gateway(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Gateway]:  # noqa: ANN001
    """Waits long enough for a slot to free on a loaded machine; a hog may queue past 4 slots."""
    with django_db_blocker.unblock():
        running = start_gateway(tmp_path_factory.mktemp("patient") / "gateway.log", OCS_QUEUE_MAX_WAIT_S="240",
                                OCS_FAIR_POLICY="tokens")
    try:
        yield running
    finally:
        stop_process(running.process)


def test_a_classmates_question_is_served_before_a_hogs_queued_stream(patient_gateway, worker) -> None:  # noqa: ANN001
    """The hog's three long answers and a bystander's shorter one take the four slots with nobody
    waiting (nothing charged yet). The hog queues one more, older and cheaper than the classmate's
    question that follows. When the bystander's answer ends, its slot goes to the classmate: the
    hog holds more than half the slots while a classmate waits (rules.over_share), and its running
    streams have been charged for what they relayed (each rule alone puts the question first: the
    timelines in tests/inference/admission test them one by one). Before both, the hog's request
    tied with the classmate's lifted counter and won."""
    hog, classmate, bystander = limited_key("hog", concurrency=8), limited_key("classmate"), limited_key("bystander")
    first_tokens: dict[str, float] = {}
    started, finished = threading.Event(), threading.Event()

    def stream(name: str, key: str, max_tokens: int, content: str) -> None:
        body = body_bytes(model=MODEL_ID, stream=True, max_tokens=max_tokens, ignore_eos=True,
                          messages=[{"role": "user", "content": content}])
        with httpx.stream("POST", patient_gateway.url + "/v1/chat/completions", content=body, timeout=300,
                          headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}) as answer:
            seen = b""
            for chunk in answer.iter_raw():
                seen += chunk
                if name not in first_tokens and content_events(seen) >= 1:
                    first_tokens[name] = time.monotonic()
                if name == "hog-0" and content_events(seen) >= 2 * 32:
                    started.set()
                if finished.is_set():
                    return  # both answers in question came: the long ones need not run to their end

    story = LONG_ANSWER[0]["content"]
    with ThreadPoolExecutor(max_workers=6) as pool:
        running = [pool.submit(stream, f"hog-{n}", hog, 480, story) for n in range(3)]
        running.append(pool.submit(stream, "bystander", bystander, 200, story))
        assert started.wait(180)
        queued = pool.submit(stream, "hog-queued", hog, 8, "Hi")
        time.sleep(1.0)  # the hog's request is in line first, and cheaper than the question
        question = pool.submit(stream, "question", classmate, 8, "What is 2+2? Answer in one word.")
        for future in (question, queued):
            future.result()
        finished.set()
        for future in running:
            future.result()
    assert first_tokens["question"] < first_tokens["hog-queued"]


class RecordingWorker:
    """A stand-in llama-server that records what reaches it and how many requests it holds at
    once; count_tokens answers after `hold_s`."""

    def __init__(self, hold_s: float = 0.5) -> None:
        self.port, self.hold_s = free_port(), hold_s
        self.paths: list[str] = []
        self.in_flight = self.most_in_flight = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                path = (await reader.readline()).decode().split()[1]
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.paths.append(path)
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                await asyncio.sleep(self.hold_s)
                self.in_flight -= 1
                answer = json.dumps({"input_tokens": 3}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(answer)).encode() + b"\r\nConnection: close\r\n\r\n" + answer)
                await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError, IndexError):
                pass
            finally:
                writer.close()

        self.loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()


@pytest.fixture
def recording(transactional_db) -> tuple[RecordingWorker, str]:  # noqa: ANN001
    from fleet.services import worker_register

    stand_in = RecordingWorker()
    model = f"recorded-{stand_in.port}"
    worker_register(name=model, base_url=f"http://127.0.0.1:{stand_in.port}", model_id=model,
                    pool_name="production", slots=4, context_length=4096, state="healthy")
    return stand_in, model


def test_a_body_far_larger_than_the_context_is_refused_before_any_worker_sees_it(gateway, recording) -> None:  # noqa: ANN001
    stand_in, model = recording
    key = limited_key("flooder")
    huge = "word " * 800_000  # 4 MB against a 4,096-token context
    refused = httpx.post(gateway.url + "/v1/messages/count_tokens", timeout=60, headers={"x-api-key": key},
                         json={"model": model, "messages": [{"role": "user", "content": huge}]})
    assert refused.status_code == 400
    assert refused.json()["type"] == "error" and "context_length_exceeded" in refused.json()["error"]["message"]
    chat = httpx.post(gateway.url + "/v1/chat/completions", timeout=60, headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": huge}]})
    assert chat.status_code == 400 and chat.json()["error"]["code"] == "context_length_exceeded"
    assert stand_in.paths == []
    counted = httpx.post(gateway.url + "/v1/messages/count_tokens", timeout=60, headers={"x-api-key": key},
                         json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
    assert counted.status_code == 200 and stand_in.paths == ["/v1/messages/count_tokens"]


def test_count_tokens_takes_two_at_a_time_and_counts_toward_the_requests_per_minute(gateway, recording) -> None:  # noqa: ANN001
    stand_in, model = recording
    key = limited_key("counter", requests_per_minute=6, concurrency=4)

    def count() -> int:
        return httpx.post(gateway.url + "/v1/messages/count_tokens", timeout=60, headers={"x-api-key": key},
                          json={"model": model, "messages": [{"role": "user", "content": "hi"}]}).status_code

    with ThreadPoolExecutor(max_workers=4) as pool:
        statuses = list(pool.map(lambda _: count(), range(4)))
    assert statuses == [200] * 4 and stand_in.most_in_flight == 2
    assert [count(), count(), count()] == [200, 200, 429]  # the seventh in a minute
