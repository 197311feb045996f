"""The rig agent end to end on this machine (CPU worker, no GPU): registers with the gateway,
launches and supervises a real llama-server, survives a crash, and its worker serves students."""
from __future__ import annotations

import signal
import subprocess
import sys

import openai
import pytest

from fleet.local_worker import free_port
from tests.conftest import ROOT, gateway_env, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass


def agent_toml(gateway_url: str, token: str, port: int, *, name: str = "cpu-1") -> str:
    return f"""
[control_plane]
url = "{gateway_url}"
token = "{token}"
[rig]
name = "test-rig"
address = "127.0.0.1"
heartbeat_s = 0.5
[[workers]]
name = "{name}"
model_id = "smollm2-135m-instruct"
port = {port}
context = 4096
slots = 2
"""


def make_rig() -> tuple[object, str]:
    """The teacher's side first: the catalogue holds the model (a rig cannot add it), then the rig."""
    from fleet.rigs import rig_create
    from fleet.services import catalog_model_ensure

    catalog_model_ensure(public_id="smollm2-135m-instruct", context_length=4096)
    return rig_create(name="test-rig", address="127.0.0.1")


def test_agent_runs_a_worker_that_serves_and_restarts_it_after_a_crash(
    gateway, monitor, student_key, transactional_db  # noqa: ANN001
) -> None:
    from fleet.agent.config import parse_agent_config
    from fleet.agent.runner import RigAgentRunner
    from fleet.models import Worker

    _rig, token = make_rig()
    agent = RigAgentRunner(parse_agent_config(agent_toml(gateway.url, token, free_port())))
    try:
        first = agent.run_round()
        assert first.registered and not first.errors
        assert first.gpu_status.startswith("no GPUs") and first.gpus == []  # this machine has none
        assert wait_for(lambda: agent.run_round().workers[0]["process_state"] == "running", timeout_s=30)

        def state() -> str:
            return Worker.objects.get(name="cpu-1").state

        assert wait_for(lambda: state() == "healthy", timeout_s=10)
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=student_key[1], max_retries=0)
        assert client.chat.completions.create(model="smollm2-135m-instruct", max_tokens=4,
                                              messages=[{"role": "user", "content": "Hi"}]).choices

        supervisor = agent.supervisors[0]
        supervisor.process.process.send_signal(signal.SIGKILL)
        supervisor.process.process.wait()
        crashed = agent.run_round()
        assert crashed.workers[0]["process_state"] == "backoff"
        assert crashed.workers[0]["last_exit_code"] == -signal.SIGKILL
        assert state() == "down"  # reported by the agent at once, before the monitor notices

        assert wait_for(lambda: agent.run_round().workers[0]["process_state"] == "running", timeout_s=30)
        assert agent.supervisors[0].restarts == 1
        assert wait_for(lambda: state() == "healthy", timeout_s=10)
    finally:
        agent.stop()
    assert agent.supervisors[0].process is None


def test_rig_agent_command_runs_a_round_and_stops_its_workers(gateway, transactional_db, tmp_path) -> None:  # noqa: ANN001

    _rig, token = make_rig()
    config = tmp_path / "rig.toml"
    config.write_text(agent_toml(gateway.url, token, free_port(), name="cpu-cmd"))
    result = subprocess.run([sys.executable, "manage.py", "rig_agent", "--config", str(config), "--once"],
                            cwd=ROOT, env=gateway_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rig test-rig: 1 worker(s)" in result.stdout
    assert "cpu-cmd=starting" in result.stdout and "no GPUs" in result.stdout

    bad = tmp_path / "bad.toml"
    bad.write_text("[rig]\nname='x'\n")
    refused = subprocess.run([sys.executable, "manage.py", "rig_agent", "--config", str(bad)],
                             cwd=ROOT, env=gateway_env(), capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "control_plane" in refused.stderr


def test_rig_agent_once_fails_when_a_worker_cannot_be_launched_or_is_refused(gateway, transactional_db,  # noqa: ANN001
                                                                           tmp_path) -> None:  # noqa: ANN001
    _rig, token = make_rig()
    config = tmp_path / "rig.toml"
    # The old example's binary, absent here: the worker stays stopped, and the check must say so.
    config.write_text(agent_toml(gateway.url, token, free_port(), name="cpu-nobinary")
                      + '[llama_server]\nbinary = "/opt/ocs/llama-server"\n')
    result = subprocess.run([sys.executable, "manage.py", "rig_agent", "--config", str(config), "--once"],
                            cwd=ROOT, env=gateway_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0, result.stdout
    assert "cpu-nobinary=stopped" in result.stdout and "not launched: cpu-nobinary" in result.stderr

    config.write_text(agent_toml(gateway.url, token, free_port(), name="cpu-unknown-model")
                      .replace('model_id = "smollm2-135m-instruct"', 'model_id = "not-in-the-catalogue"'))
    result = subprocess.run([sys.executable, "manage.py", "rig_agent", "--config", str(config), "--once"],
                            cwd=ROOT, env=gateway_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "not in the catalogue" in result.stderr, result.stderr


def test_an_agent_started_again_after_dying_serves_nothing_until_its_new_worker_is_healthy(
    gateway, monitor, student_key, transactional_db  # noqa: ANN001
) -> None:
    from fleet.agent.config import parse_agent_config
    from fleet.agent.runner import RigAgentRunner
    from fleet.models import Worker, WorkerEvent

    _rig, token = make_rig()
    config = parse_agent_config(agent_toml(gateway.url, token, free_port(), name="cpu-again"))

    def state() -> str:
        return Worker.objects.get(name="cpu-again").state

    first = RigAgentRunner(config)
    try:
        assert wait_for(lambda: first.run_round().workers[0]["process_state"] == "running", timeout_s=30)
        assert wait_for(lambda: state() == "healthy", timeout_s=10)
    finally:
        for supervisor in first.supervisors:  # the agent dies: its workers die with it, unreported
            supervisor.stop()
    assert state() == "healthy"  # the stale row the next run must not trust

    second = RigAgentRunner(config)
    try:
        assert second.run_round().registered
        assert state() == "starting"  # at once, before its llama-server has loaded
        assert wait_for(lambda: second.run_round().workers[0]["process_state"] == "running", timeout_s=30)
        assert wait_for(lambda: state() == "healthy", timeout_s=10)
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=student_key[1], max_retries=0)
        assert client.chat.completions.create(model="smollm2-135m-instruct", max_tokens=4,
                                              messages=[{"role": "user", "content": "Hi"}]).choices
        cold_starts = WorkerEvent.objects.filter(worker__name="cpu-again", cold_start_s__isnull=False)
        assert cold_starts.count() == 2 and all(event.cold_start_s < 120 for event in cold_starts)
    finally:
        second.stop()
