"""deploy/nginx/ocs.conf running for real on loopback (TLS with a self-signed certificate) in
front of the session's gateway and llama-server: streams pass through chunk by chunk, an
oversized body is refused by the proxy itself, and the access log never holds a key."""
from __future__ import annotations

import json
import ssl
import time

import httpx
import pytest

from tests.conftest import MODEL_ID, ROOT, wait_for
from tests.deploy.proxy import RunningNginx

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def client(proxy: RunningNginx) -> httpx.Client:
    return httpx.Client(base_url=proxy.prepared.https_url, timeout=60, trust_env=False,
                        verify=ssl.create_default_context(cafile=str(proxy.prepared.cert)))


def test_a_streamed_completion_arrives_chunk_by_chunk_through_the_proxy(proxy, worker, student_key) -> None:  # noqa: ANN001
    _, raw_key = student_key
    body = {"model": MODEL_ID, "stream": True, "max_tokens": 48, "temperature": 0,
            "messages": [{"role": "user", "content": "Count from one to twenty in words."}]}
    reads: list[tuple[float, int]] = []  # (arrival, data events in this read)
    text = ""
    with client(proxy) as http, http.stream("POST", "/v1/chat/completions", json=body,
                                            headers={"Authorization": f"Bearer {raw_key}"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for piece in response.iter_raw():
            chunk = piece.decode()
            events = [line for line in chunk.splitlines() if line.startswith("data:")]
            if events:
                reads.append((time.monotonic(), len(events)))
            text += chunk
    assert "data: [DONE]" in text
    deltas = [json.loads(line[5:]) for line in text.splitlines()
              if line.startswith("data:") and line.strip() != "data: [DONE]"]
    assert sum(1 for d in deltas if d.get("choices") and d["choices"][0]["delta"].get("content")) >= 5
    # Buffered, the whole answer would come in one read at the end; unbuffered, the tokens
    # come as they are made, in many separate reads.
    assert len(reads) >= 5, reads


def test_an_oversized_body_is_refused_by_the_proxy_with_413(proxy, worker, student_key) -> None:  # noqa: ANN001
    _, raw_key = student_key
    oversized = b'{"model": "' + MODEL_ID.encode() + b'", "messages": [], "pad": "' + b"x" * (9 * 1024 * 1024) + b'"}'
    with client(proxy) as http:
        response = http.post("/v1/chat/completions", content=oversized,
                             headers={"Authorization": f"Bearer {raw_key}", "Content-Type": "application/json"})
    assert response.status_code == 413
    # nginx's own page, not the gateway's JSON envelope: the body never reached the gateway.
    assert "nginx" in response.text and "request_too_large" not in response.text


def test_the_access_log_never_holds_the_key_of_an_ollama_path(proxy, worker, student_key) -> None:  # noqa: ANN001
    key_row, raw_key = student_key
    with client(proxy) as http:
        # The gateway's fleet snapshot may predate this test's worker row by up to a second.
        def tags() -> httpx.Response | None:
            answer = http.get(f"/ollama/{raw_key}/api/tags", headers={"User-Agent": "copilot-test"})
            return answer if MODEL_ID in answer.text else None

        response = wait_for(tags, 10)
        assert response is not None and response.status_code == 200
        http.get(f"/v1/models?leak={raw_key}")
    # nginx writes a request's line after its response has gone: wait for both requests' lines
    # (reading after the first only once missed the second's, in CI).
    def both_lines() -> str | None:
        text = proxy.access_log()
        return text if "copilot-test" in text and "GET /v1/models" in text else None

    log = wait_for(both_lines, 10)
    assert log, proxy.access_log()
    secret = raw_key.split("-", 2)[2]
    assert raw_key not in log and secret not in log
    assert "/ollama/[key]/api/tags" in log
    assert f"ocs-{key_row.prefix}-[redacted]" in log  # elsewhere in a URI: only the public prefix stays


def test_plain_http_is_redirected_to_https(proxy) -> None:  # noqa: ANN001
    response = httpx.get(f"http://127.0.0.1:{proxy.prepared.http_port}/v1/models", trust_env=False,
                         headers={"Host": "ai.school.example"})
    assert response.status_code == 301
    assert response.headers["location"] == "https://ai.school.example/v1/models"


def test_static_files_are_served_by_the_proxy(proxy) -> None:  # noqa: ANN001
    stylesheet = ROOT / "static" / "ocs" / "site.css"
    (proxy.prepared.static_root / "ocs").mkdir(parents=True, exist_ok=True)
    (proxy.prepared.static_root / "ocs" / "site.css").write_bytes(stylesheet.read_bytes())
    with client(proxy) as http:
        response = http.get("/static/ocs/site.css")
    assert response.status_code == 200
    assert response.content == stylesheet.read_bytes()
