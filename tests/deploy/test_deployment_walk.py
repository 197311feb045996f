"""The deployment path of docs/deployment.md, walked as an operator would on one machine (issue
22, item 9): nginx from deploy/nginx/ocs.conf with a self-signed certificate in front of two
gateways in production mode; a rig agent that trusts that certificate through `ca_file`;
`verify_path --ca-file` over the public hop; the local Prometheus scrape on a gateway's plain-HTTP
port; `/metrics` through the tunnel only with the token; and a second installation sharing the
same Redis under another namespace without seeing the first one's live state.

Runs in the PostgreSQL + Redis pass: two gateways and a shared Redis are what it walks."""
from __future__ import annotations

import ssl
from io import StringIO

import httpx
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from tests.conftest import MODEL_ID, start_gateway, stop_process, wait_for
from tests.deploy.proxy import RunningNginx, prepare_nginx

pytestmark = [
    pytest.mark.integration, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="walks two gateways on a shared Redis: the PostgreSQL + "
                                                      "Redis pass runs it"),
]

TOKEN = "metrics-token-" + "m" * 30
PRODUCTION = {"OCS_ENV": "production", "OCS_SECRET_KEY": "walk-" + "s" * 40,
              "OCS_ALLOWED_HOSTS": "ai.school.example,127.0.0.1,localhost", "OCS_METRICS_TOKEN": TOKEN}


def busy_slots(metrics: str, worker: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("ocs_worker_busy_slots{") and f'worker="{worker}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no ocs_worker_busy_slots for {worker} in the scrape")


def test_the_deployment_path_walked_end_to_end(worker, student_key, tmp_path) -> None:  # noqa: ANN001
    from fleet.agent.config import parse_agent_config
    from fleet.agent.runner import RigAgentRunner
    from fleet.models import Rig
    from fleet.rigs import rig_create

    first = start_gateway(tmp_path / "gateway-1.log", **PRODUCTION)
    second = start_gateway(tmp_path / "gateway-2.log", **PRODUCTION)
    other_install = start_gateway(tmp_path / "gateway-other.log", **PRODUCTION,
                                  OCS_LIVE_NAMESPACE=f"{settings.OCS_LIVE_NAMESPACE}-other-install")
    proxy = RunningNginx(prepare_nginx(tmp_path, gateway_port=first.port, second_gateway_port=second.port))
    trusted = ssl.create_default_context(cafile=str(proxy.prepared.cert))
    _, raw_key = student_key
    try:
        # A rig agent on the far side of the public hop, trusting the private CA named in rig.toml.
        _rig, rig_token = rig_create(name="walk-rig", address="127.0.0.1")
        agent = RigAgentRunner(parse_agent_config(f"""
[control_plane]
url = "{proxy.prepared.https_url}"
token = "{rig_token}"
ca_file = "{proxy.prepared.cert}"
[rig]
name = "walk-rig"
address = "127.0.0.1"
"""), telemetry=lambda: ("no GPUs (test)", []))
        reported = agent.run_round()
        assert reported.registered and not reported.errors, reported.errors
        assert Rig.objects.get(name="walk-rig").last_heartbeat_at is not None

        # verify_path over TLS with the private CA: every hop, the worker reached through the gateway.
        out = StringIO()
        try:
            call_command("verify_path", "--base-url", proxy.prepared.https_url, "--api-key", raw_key,
                         "--ca-file", str(proxy.prepared.cert), stdout=out)
        except CommandError as error:
            pytest.fail(f"verify_path failed: {error}\n{out.getvalue()}")
        assert out.getvalue().strip().splitlines()[-1].startswith("VERDICT: PASS"), out.getvalue()
        assert raw_key not in out.getvalue()

        # Both gateways behind nginx serve students.
        with httpx.Client(base_url=proxy.prepared.https_url, verify=trusted, trust_env=False, timeout=120) as http:
            for _ in range(4):
                answer = http.post("/v1/chat/completions", headers={"Authorization": f"Bearer {raw_key}"},
                                   json={"model": MODEL_ID, "max_tokens": 4,
                                         "messages": [{"role": "user", "content": "Say hi."}]})
                assert answer.status_code == 200, answer.text
        for gateway in (first, second):
            assert wait_for(lambda g=gateway: "/v1/chat/completions" in g.log(), 10), gateway.log()[-2000:]

        # The local Prometheus scrape: plain HTTP on a gateway's port from the VM itself, no redirect.
        for gateway in (first, second):
            scrape = httpx.get(f"http://127.0.0.1:{gateway.port}/metrics", timeout=30, follow_redirects=False)
            assert scrape.status_code == 200 and "ocs_worker_state" in scrape.text, scrape.status_code
        # Through the tunnel (a public client address in CF-Connecting-IP): only with the token.
        with httpx.Client(base_url=proxy.prepared.https_url, verify=trusted, trust_env=False, timeout=30) as http:
            from_internet = {"CF-Connecting-IP": "203.0.113.9"}
            assert http.get("/metrics", headers=from_internet).status_code == 403
            assert http.get("/metrics", headers={**from_internet, "Authorization": f"Bearer {TOKEN}"}).status_code \
                == 200

        # Another installation on the same Redis, another namespace: it does not see this one's
        # slots. A stream held open here shows as a busy slot in this install's scrape only.
        body = {"model": MODEL_ID, "stream": True, "max_tokens": 1500, "ignore_eos": True, "temperature": 0,
                "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]}
        with httpx.Client(base_url=proxy.prepared.https_url, verify=trusted, trust_env=False, timeout=120) as http, \
                http.stream("POST", "/v1/chat/completions", json=body,
                            headers={"Authorization": f"Bearer {raw_key}"}) as response:
            assert response.status_code == 200
            pieces = response.iter_raw()
            next(pieces), next(pieces)  # the role chunk and the first token: the stream holds its slot

            def scrape(gateway) -> float:  # noqa: ANN001
                return busy_slots(httpx.get(f"http://127.0.0.1:{gateway.port}/metrics", timeout=30).text, worker.name)

            assert wait_for(lambda: scrape(first) == 1, 15), "the open stream's slot is not counted in this install"
            assert scrape(second) == 1  # the same live state: the other gateway of this install sees it
            assert scrape(other_install) == 0  # the other install's live state is its own
    finally:
        proxy.stop()
        for gateway in (first, second, other_install):
            stop_process(gateway.process)
