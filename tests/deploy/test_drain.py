"""The upgrade procedure of docs/deployment.md ("Upgrades without dropping streams"), on
loopback: a gateway marked `down` in nginx's upstream and reloaded keeps streaming what it
carries, gets no new requests, and its established connections (what the drain loop counts
with `ss`) fall to 0 once its streams end."""
from __future__ import annotations

import json
import ssl
import subprocess
import time

import httpx
import pytest

from tests.conftest import MODEL_ID, start_gateway, wait_for
from tests.deploy.proxy import RunningNginx, prepare_nginx

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def in_flight(port: int) -> int:
    """The docs' drain check: established TCP connections whose local port is the gateway's."""
    result = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"],
                            capture_output=True, text=True, check=True, timeout=10)
    return len([line for line in result.stdout.splitlines() if line.strip()])


def test_a_gateway_taken_out_of_nginx_finishes_its_stream_and_drains_to_zero(gateway, worker, student_key,  # noqa: ANN001
                                                                             tmp_path) -> None:
    second = start_gateway(tmp_path / "gateway-2.log")
    proxy = RunningNginx(prepare_nginx(tmp_path, gateway_port=gateway.port, second_gateway_port=second.port))
    try:
        _, raw_key = student_key
        body = {"model": MODEL_ID, "stream": True, "max_tokens": 160, "temperature": 0,
                "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]}
        http = httpx.Client(base_url=proxy.prepared.https_url, timeout=120, trust_env=False,
                            verify=ssl.create_default_context(cafile=str(proxy.prepared.cert)))
        with http, http.stream("POST", "/v1/chat/completions", json=body,
                               headers={"Authorization": f"Bearer {raw_key}"}) as response:
            assert response.status_code == 200
            pieces = response.iter_raw()
            text = next(pieces).decode()
            carrying = wait_for(lambda: next((p for p in (gateway.port, second.port) if in_flight(p)), None), 5)
            assert carrying, "the stream's gateway has no established connection"
            other = second.port if carrying == gateway.port else gateway.port
            # Step 2 of the upgrade: mark it down and reload.
            site = proxy.prepared.site.read_text()
            proxy.prepared.site.write_text(site.replace(f"server 127.0.0.1:{carrying};",
                                                        f"server 127.0.0.1:{carrying} down;", 1))
            proxy.prepared.reload()
            time.sleep(1)  # new nginx workers take over
            # New requests go to the other gateway only (each gateway's access log says which).
            logs = {gateway.port: gateway.log, second.port: second.log}
            before = {port: log().count("/readyz") for port, log in logs.items()}
            with httpx.Client(base_url=proxy.prepared.https_url, timeout=30, trust_env=False,
                              verify=ssl.create_default_context(cafile=str(proxy.prepared.cert))) as fresh:
                for _ in range(3):
                    assert fresh.get("/readyz").status_code == 200
            assert wait_for(lambda: logs[other]().count("/readyz") == before[other] + 3, 10), logs[other]()[-2000:]
            assert logs[carrying]().count("/readyz") == before[carrying]
            assert in_flight(carrying) >= 1  # still streaming: not drained yet
            for piece in pieces:
                text += piece.decode()
        assert text.rstrip().endswith("data: [DONE]")
        events = [json.loads(line[5:]) for line in text.splitlines()
                  if line.startswith("data:") and line.strip() != "data: [DONE]"]
        assert not any("error" in event for event in events)
        assert events[-1]["choices"][0]["finish_reason"] in {"stop", "length"}  # the whole answer came
        assert wait_for(lambda: in_flight(carrying) == 0, 15), "the drained gateway still has connections"
    finally:
        proxy.stop()
        second.process.terminate()
        second.process.wait(timeout=15)
