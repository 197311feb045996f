"""The rig agent end to end on this machine (CPU worker, no GPU): registers with the gateway,
launches and supervises a real llama-server, survives a crash, and its worker serves students."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


@contextmanager
def agent_in_a_loop(gateway_url: str) -> Iterator[object]:
    """A registered real agent doing its rounds on a thread (as `rig_agent` does), its one worker
    running; stopped after."""
    from fleet.agent.config import parse_agent_config
    from fleet.agent.runner import RigAgentRunner
    from fleet.models import Worker

    _rig, token = make_rig()
    agent = RigAgentRunner(parse_agent_config(agent_toml(gateway_url, token, free_port())))
    stop = threading.Event()

    def rounds() -> None:
        while not stop.is_set():
            agent.run_round()
            stop.wait(0.3)

    looping = threading.Thread(target=rounds, daemon=True)
    looping.start()
    try:
        assert wait_for(lambda: Worker.objects.filter(name="cpu-1", process_state="running").exists(), timeout_s=60)
        yield agent
    finally:
        stop.set()
        looping.join(10)
        agent.stop()


def test_agent_jobs_bench_the_engine_restart_cold_and_a_cancel_restores_the_worker(
    gateway, transactional_db  # noqa: ANN001
) -> None:
    """Jobs from the control plane reach the real agent in its heartbeat answers (issue 19): a
    llama-bench with the worker stopped and started after; a --no-warmup restart whose worker has
    decoded nothing; a cancelled llama-bench that still gives the worker back."""
    from fleet.models import Worker
    from fleet.rig_jobs import job_cancel, job_request, job_wait
    from research.rig_baseline import worker_decodes

    with agent_in_a_loop(gateway.url) as agent:
        worker = Worker.objects.get(name="cpu-1")
        pid_before = agent.supervisors[0].process.pid

        bench = job_wait(job_request(worker=worker, kind="llama-bench",
                                     params={"prompt": [16], "generate": 4, "repetitions": 1}), timeout_s=120)
        assert bench.state == "done", bench.error
        tests = sorted((row["n_prompt"], row["n_gen"]) for row in bench.result["rows"])
        assert tests == [(0, 4), (16, 0)] and all(row["avg_ts"] > 0 for row in bench.result["rows"])
        assert bench.result["restored"]["time_to_healthy_s"] > 0  # the worker was started again after it
        assert bench.result["restored"]["launched_no_warmup"] is False  # as configured
        assert agent.supervisors[0].process.pid != pid_before and not agent.supervisors[0].held

        cold = job_wait(job_request(worker=worker, kind="restart", params={"no_warmup": True}), timeout_s=120)
        assert cold.state == "done", cold.error
        assert cold.result["no_warmup"] is True and cold.result["launched_no_warmup"] is True
        assert cold.result["time_to_healthy_s"] > 0
        worker.refresh_from_db()
        assert worker_decodes(worker) == 0  # nothing decoded before the first request

        long = job_request(worker=worker, kind="llama-bench", params={"prompt": [512], "generate": 256,
                                                                      "repetitions": 50})
        assert wait_for(lambda: agent.supervisors[0].held, timeout_s=30)  # stopped for llama-bench
        job_cancel(long)
        long = job_wait(long, timeout_s=60)
        assert long.state == "cancelled", (long.state, long.error)
        assert not agent.supervisors[0].held and agent.supervisors[0].process is not None
        assert wait_for(lambda: agent.supervisors[0].state == "running", timeout_s=30)


def test_a_baseline_stopped_with_ctrl_c_during_llama_bench_gives_the_worker_back(
    gateway, transactional_db, tmp_path, request  # noqa: ANN001
) -> None:
    """Ctrl-C while the agent runs llama-bench: the job is cancelled, the agent starts the worker
    again, the worker returns to the monitor's care (not left drained), the baseline says aborted."""
    import _thread

    from fleet.models import Worker
    from research.models import Baseline
    from research.rig_baseline import BaselineOptions, BaselineRunner

    with agent_in_a_loop(gateway.url) as agent:
        worker = Worker.objects.select_related("model", "pool").get(name="cpu-1")

        def ctrl_c_once_held() -> None:
            # interrupt_main only trips a flag: the KeyboardInterrupt is raised wherever the main
            # thread next checks it, and one raised inside a finalizer run by the garbage
            # collector (an aiohttp session of an earlier test, say) is printed and dropped. So
            # Ctrl-C is pressed again only if the agent has not been told to cancel 10 s later
            # (a lost press; a delivered one has the job cancelled within a heartbeat or two).
            if not wait_for(lambda: agent.supervisors[0].held, timeout_s=60):
                return
            for _ in range(5):
                _thread.interrupt_main()
                if wait_for(lambda: agent.jobs.current is not None and agent.jobs.current.cancel.is_set(),
                            timeout_s=10):
                    return

        # Ctrl-C as in `manage.py rig_baseline`: Python's own SIGINT handler, whatever an earlier
        # test in this process left installed (asyncio runners and commands replace it).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
        threading.Thread(target=ctrl_c_once_held, daemon=True).start()
        runner = BaselineRunner(worker=worker, out=lambda line: None, report_dir=tmp_path,
                                options=BaselineOptions(steps=("engine", "warm"), engine_prompt=(512,),
                                                        engine_repetitions=50, output_tokens=256))
        with pytest.raises(KeyboardInterrupt):
            runner.run()
        baseline = Baseline.objects.get()
        assert baseline.status == "aborted" and baseline.steps == []  # stopped in its first step
        assert not agent.supervisors[0].held
        assert wait_for(lambda: agent.supervisors[0].state == "running", timeout_s=30)
        worker.refresh_from_db()
        assert worker.state != "draining"  # given back to the monitor
        assert worker.jobs.get().state == "cancelled"
        assert "aborted" in Path(baseline.report_path).read_text()
