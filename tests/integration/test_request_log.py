"""The request log under stress: a gateway stopped mid-load, rows the database refuses, keys
that must never be stored, and the roll-ups teachers chart."""
from __future__ import annotations

import signal
import threading
from datetime import timedelta

import httpx
import pytest
from django.db import connection
from django.utils import timezone

from tests.conftest import MODEL_ID, start_gateway, wait_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("server", ["uvicorn", "daphne"])  # the default, and the one still supported
def test_sigterm_during_load_leaves_a_row_for_every_request_that_got_a_response(
    worker, student_key, tmp_path, server: str  # noqa: ANN001
) -> None:
    from inference.models import RequestLog

    # A long flush interval: without the shutdown flush, every row would still be buffered.
    gateway = start_gateway(tmp_path / "gateway.log", OCS_REQUEST_LOG_FLUSH_S="600", OCS_GATEWAY_SERVER=server)
    secret = student_key[1].rsplit("-", 1)[1]
    httpx.get(gateway.url + f"/ollama/{student_key[1]}/api/tags", headers={"User-Agent": "sigterm-tags"})
    answered: list[str] = []
    lock = threading.Lock()

    def ask(i: int) -> None:
        agent = f"sigterm-{i}"
        streams = i % 2 == 0  # long streams: in flight when the signal comes; short answers: done
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": f"Count to {i + 200}."}],
                "max_tokens": 400 if streams else 8, "stream": streams}
        headers = {"Authorization": f"Bearer {student_key[1]}", "User-Agent": agent}
        try:
            with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers,
                              timeout=60) as response:
                with lock:
                    answered.append(agent)  # a status line arrived: this request got a response
                response.read()
        except httpx.HTTPError:
            pass

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    streaming = {f"sigterm-{i}" for i in range(0, 12, 2)}
    assert wait_for(lambda: len(streaming & set(answered)) >= 3, timeout_s=60), "no stream started"
    gateway.process.send_signal(signal.SIGTERM)
    gateway.process.wait(timeout=30)
    for thread in threads:
        thread.join(timeout=60)
    logged = set(RequestLog.objects.filter(user_agent__startswith="sigterm-").values_list("user_agent", flat=True))
    assert answered and set(answered) <= logged, f"answered but not logged: {set(answered) - logged}"
    assert "wrote" in gateway.log() and "buffered rows on shutdown" in gateway.log()
    # Both servers' access logs carry the Ollama route's path, redacted.
    assert "[redacted]/api/tags" in gateway.log() and secret not in gateway.log()


@pytest.mark.django_db(transaction=True)
def test_a_row_the_database_refuses_is_dropped_without_losing_the_others() -> None:
    from inference.models import RequestLog
    from inference.request_context import RequestContext
    from inference.request_log import RequestLogWriter

    writer = RequestLogWriter(flush_every_s=600)
    good = RequestContext(client="openai", path="/v1/models").row(status=200, error_code="")
    bad = RequestContext(client="openai", path="/v1/models").row(status=-1, error_code="")  # violates a CHECK
    for row in (good, bad, dict(good, path="/v1/chat/completions")):
        writer.submit(row)
    assert writer.flush() == 2 and writer.pending() == 0
    assert sorted(RequestLog.objects.values_list("path", flat=True)) == ["/v1/chat/completions", "/v1/models"]
    writer.close()


def test_no_raw_key_reaches_the_database_or_the_gateway_log(gateway, worker, student_key) -> None:  # noqa: ANN001
    from inference.models import RequestLog

    raw = student_key[1]
    secret = raw.rsplit("-", 1)[1]
    headers = {"Authorization": f"Bearer {raw}", "User-Agent": "no-key-test"}
    httpx.post(gateway.url + "/v1/chat/completions", headers=headers,
               json={"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    httpx.get(gateway.url + f"/ollama/{raw}/api/tags", headers={"User-Agent": "no-key-test"})
    httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": raw, "User-Agent": "no-key-test"}, json={})
    assert wait_for(lambda: RequestLog.objects.filter(user_agent="no-key-test").count() == 3, timeout_s=10)
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            for row in cursor.fetchall():
                assert not any(secret in str(value) for value in row), f"raw key found in {table}"
    assert secret not in gateway.log()


@pytest.mark.django_db(transaction=True)
def test_daily_rollups_sum_per_student_and_class_and_pruning_keeps_them(student, other_student) -> None:  # noqa: ANN001
    from accounts.models import Classroom
    from inference.models import DailyUsage, RequestLog
    from inference.selectors import class_daily_usage
    from inference.tasks import prune_request_log, rollup_usage

    room = Classroom.objects.create(name="7b")
    student.classroom = room
    student.save()
    now = timezone.now()
    old = now - timedelta(days=400)

    def row(user, at, status=200, prompt=10, completion=5):  # noqa: ANN001, ANN202
        return RequestLog(at=at, user=user, model=MODEL_ID, client="openai", path="/v1/chat/completions",
                          status=status, prompt_tokens=prompt, completion_tokens=completion)

    RequestLog.objects.bulk_create([row(student, now), row(student, now, status=429, prompt=0, completion=0),
                                    row(other_student, now, prompt=7, completion=3), row(student, old)])
    assert rollup_usage() == 2
    mine = DailyUsage.objects.get(user=student, day=timezone.localdate())
    assert (mine.requests, mine.errors, mine.prompt_tokens, mine.completion_tokens, mine.classroom) == (2, 1, 10, 5, room)
    assert rollup_usage() == 2 and DailyUsage.objects.filter(day=timezone.localdate()).count() == 2  # idempotent
    other_student.classroom = room
    other_student.save()
    rollup_usage()  # the class as it is now: both students in 7b
    (day,) = [d for d in class_daily_usage(room) if d["day"] == timezone.localdate().isoformat()]
    assert (day["students"], day["requests"], day["prompt_tokens"], day["completion_tokens"]) == (2, 3, 17, 8)
    assert prune_request_log() == 1
    assert RequestLog.objects.count() == 3
    kept = DailyUsage.objects.get(user=student, day=timezone.localtime(old).date())
    assert (kept.requests, kept.prompt_tokens) == (1, 10)  # rolled up before its rows went
