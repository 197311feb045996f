"""The rig agent through deploy/nginx/ocs.conf with a self-signed certificate (issue 22): it
trusts the CA named by `ca_file` in rig.toml, and without it refuses the certificate."""
from __future__ import annotations

import pytest

from tests.deploy.proxy import RunningNginx

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral, pytest.mark.django_db(transaction=True)]


def agent_for(proxy: RunningNginx, token: str, ca_line: str):  # noqa: ANN201
    from fleet.agent.config import parse_agent_config
    from fleet.agent.runner import RigAgentRunner

    return RigAgentRunner(parse_agent_config(f"""
[control_plane]
url = "{proxy.prepared.https_url}"
token = "{token}"
{ca_line}
[rig]
name = "tls-rig"
address = "127.0.0.1"
"""), telemetry=lambda: ("no GPUs (test)", []))


def test_the_agent_trusts_the_private_ca_its_config_names(proxy) -> None:  # noqa: ANN001
    from fleet.models import Rig
    from fleet.rigs import rig_create

    _rig, token = rig_create(name="tls-rig", address="127.0.0.1")
    untrusting = agent_for(proxy, token, "")
    refused = untrusting.run_round()
    assert not refused.registered and "CERTIFICATE_VERIFY_FAILED" in " ".join(refused.errors)

    trusting = agent_for(proxy, token, f'ca_file = "{proxy.prepared.cert}"')
    result = trusting.run_round()
    assert result.registered and not result.errors, result.errors
    assert Rig.objects.get(name="tls-rig").last_heartbeat_at is not None
