"""The "watch your request" step end to end: a real streamed request through the session's
gateway, the scheduling lesson's fleet panel (served by that same gateway, so it reads the same
live state) polled with the student's session while the answer streams."""
from __future__ import annotations

import threading

import httpx
import pytest
from django.conf import settings
from django.test import Client

from lessons.syllabus import load_catalogue
from lessons.models import FleetSighting
from lessons.services import step_verify
from tests.conftest import MODEL_ID, wait_for

pytestmark = pytest.mark.integration


def test_the_fleet_panel_sees_my_streaming_request_and_the_step_turns_done(gateway, worker, student, student_key) -> None:  # noqa: ANN001
    session = Client()
    session.force_login(student)
    cookies = {settings.SESSION_COOKIE_NAME: session.cookies[settings.SESSION_COOKIE_NAME].value}
    _, raw_key = student_key
    step = load_catalogue().step("watch-fleet")
    assert step is not None
    assert not step_verify(user=student, step=step).done

    first_chunk, finished, stop = threading.Event(), threading.Event(), threading.Event()

    def stream() -> None:
        body = {"model": MODEL_ID, "stream": True, "max_tokens": 300, "temperature": 0,
                "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]}
        try:
            with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body, timeout=120,
                              headers={"Authorization": f"Bearer {raw_key}"}) as response:
                for _ in response.iter_lines():
                    first_chunk.set()
                    if stop.is_set():  # the student has seen it: hang up (the gateway frees the slot)
                        break
        finally:
            finished.set()

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    assert first_chunk.wait(60)
    seen = []
    while not finished.is_set():
        data = httpx.get(f"{gateway.url}/lessons/fleet.json", cookies=cookies, timeout=10).json()
        seen.append(data["mine_in_flight"])
        if data["mine_in_flight"]:
            assert {w["name"]: w["busy"] for w in data["workers"]}["it-worker"] >= 1
            break
    stop.set()
    streamer.join(120)
    assert 1 in seen, f"the panel never saw the request in flight: {seen}"
    assert wait_for(lambda: FleetSighting.objects.filter(user=student).exists(), timeout_s=5)
    result = step_verify(user=student, step=step)
    assert result.done and "in flight" in result.message
    # Once the client has hung up, nothing of the student's is in flight any more.
    assert wait_for(lambda: httpx.get(f"{gateway.url}/lessons/fleet.json", cookies=cookies,
                                      timeout=10).json()["mine_in_flight"] == 0, timeout_s=30)
    assert httpx.get(f"{gateway.url}/lessons/fleet.json", timeout=10).status_code == 401
