"""The front door: `manage.py demo` comes up, prints its contract lines, serves, and stops cleanly."""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from fleet.local_worker import free_port
from tests.conftest import MODEL_ID, ROOT, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass


def _read_until(process: subprocess.Popen[str], marker: str, timeout_s: float) -> list[str]:
    """Lines the process prints up to and including the first that starts with `marker`."""
    found: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in process.stdout:
            found.put(line.rstrip("\n"))
        found.put(None)

    threading.Thread(target=pump, daemon=True).start()
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = found.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        lines.append(line)
        if line.startswith(marker):
            return lines
    raise AssertionError(f"{marker!r} not printed within {timeout_s} s; got: {lines}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for every practical purpose.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def _descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def test_demo_with_three_workers_survives_a_killed_worker_and_stops_everything(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OCS_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    port = free_port()
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(port), "--workers", "3", "--slots", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    started: set[int] = set()
    try:
        lines = _read_until(demo, "OCS_API_KEY=", timeout_s=120)
        worker_pids = [int(m.group(1)) for line in lines if (m := re.search(r"pid (\d+)\)", line))]
        assert len(worker_pids) == 3
        assert f"OCS_BASE_URL=http://127.0.0.1:{port}/v1" in lines
        raw_key = lines[-1].removeprefix("OCS_API_KEY=")
        assert re.fullmatch(r"ocs-[a-z0-9]{10}-[A-Za-z0-9]{40}", raw_key)
        assert any("demo-teacher password: " in line for line in lines)

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=raw_key, max_retries=0,
                               timeout=120)
        text = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model=MODEL_ID, stream=True, max_tokens=16, messages=[{"role": "user", "content": "Hello!"}]
            )
            if chunk.choices
        )
        assert text.strip()

        def ask(_: int) -> str | None:
            return client.chat.completions.create(
                model=MODEL_ID, max_tokens=32, messages=[{"role": "user", "content": "Name three rivers."}]
            ).choices[0].message.content

        with ThreadPoolExecutor(max_workers=8) as pool:  # the site default concurrency (OCS_DEFAULT_CONCURRENCY) is 8
            futures = [pool.submit(ask, i) for i in range(8)]
            time.sleep(0.3)
            os.kill(worker_pids[0], signal.SIGKILL)
            assert all(f.result() is not None for f in futures)  # no request lost
        started = _descendants(demo.pid)
        # The demo's rig agent replaces the dead worker with a new process.
        assert wait_for(lambda: len([p for p in _descendants(demo.pid) if _is_llama(p)]) == 3, timeout_s=30)
        started |= _descendants(demo.pid)
    finally:
        started |= _descendants(demo.pid)
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=60)
    assert demo.returncode == 0
    assert wait_for(lambda: not any(_pid_alive(pid) for pid in started), timeout_s=15), (
        "processes left running after the demo stopped: "
        + ", ".join(Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")[:80] for p in started if _pid_alive(p))
    )


def _is_llama(pid: int) -> bool:
    try:
        return "llama-server" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


REHEARSAL_FACTS = """
import json
from pathlib import Path
from fleet.models import Gpu, Rig, Worker
from lessons.research_bridge import benchmark_runs
from research.models import BenchmarkRun
rig = Rig.objects.get(name="rehearsal-rig")
run = BenchmarkRun.objects.filter(worker__name="rehearsal-rig-a").order_by("-id").first()
print(json.dumps({
    "rehearsal": rig.rehearsal,
    "gpus": sorted(Gpu.objects.filter(rig=rig).values_list("name", "uuid")),
    "workers": {w.name: [w.gpu_indices, w.launch.get("model_path"), Path(w.launch.get("model_path", "")).is_file()]
                for w in Worker.objects.filter(rig=rig)},
    "run": {"launch_rehearsal": run.launch.get("rehearsal"), "measured_on": benchmark_runs()[0].measured_on,
            "facts_from": (run.summary.get("roofline") or {}).get("model_facts_from")},
}))
"""


def test_demo_again_reuses_the_database_issues_a_new_key_and_rehearses_rig_day(tmp_path: Path) -> None:
    """The second start is `--rehearsal` (issue 19): the real rig agent from a rig-side directory,
    NVML faked, 2 workers x 4 cards; a bench run against one of its workers from the control
    plane's checkout, where the model path the rig reports opens nothing."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OCS_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    keys, rehearsal_lines = [], []
    for args in (["--workers", "0"], ["--rehearsal", "--slots", "1", "--context", "2048"]):
        demo = subprocess.Popen(
            [sys.executable, "manage.py", "demo", "--port", str(free_port()), *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        try:
            lines = _read_until(demo, "OCS_API_KEY=", timeout_s=120)
            keys.append(lines[-1])
            if "--rehearsal" in args:
                rehearsal_lines = lines
                bench = subprocess.run(
                    [sys.executable, "manage.py", "bench", "--worker", "rehearsal-rig-a", "--requests", "2",
                     "--warmup", "0", "--prompt-tokens", "20", "--output-tokens", "16"],
                    cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
                assert bench.returncode == 0, bench.stdout + bench.stderr
        finally:
            demo.send_signal(signal.SIGINT)
            demo.wait(timeout=60)
        assert demo.returncode == 0
    assert keys[0] != keys[1]
    assert any(line.startswith("REHEARSAL: rig rehearsal-rig is a rehearsal rig") for line in rehearsal_lines)
    assert any("worker rehearsal-rig-a: healthy" in line and "(GPUs 0,1,2,3," in line for line in rehearsal_lines)
    assert any("worker rehearsal-rig-b: healthy" in line and "(GPUs 4,5,6,7," in line for line in rehearsal_lines)
    rig_dir = tmp_path / "rehearsal-rig"
    assert 'telemetry = "rehearsal"' in (rig_dir / "rig.toml").read_text()
    assert (rig_dir / "rig.token").stat().st_mode & 0o077 == 0
    facts = json.loads(subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", REHEARSAL_FACTS],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout)
    assert facts["rehearsal"] is True
    assert len(facts["gpus"]) == 8 and all(name == "NVIDIA GeForce GTX 1070" and uuid.startswith("REHEARSAL-")
                                           for name, uuid in facts["gpus"])
    model_path = facts["workers"]["rehearsal-rig-a"][1]
    assert facts["workers"]["rehearsal-rig-a"][0] == [0, 1, 2, 3] and facts["workers"]["rehearsal-rig-b"][0] == [4, 5, 6, 7]
    # The rig's model path, relative to the rig's directory: from the control plane's it opens nothing.
    assert model_path.startswith("models/") and facts["workers"]["rehearsal-rig-a"][2] is False
    # The run keeps that it was a rehearsal; its roofline came from the agent's report of the file.
    assert facts["run"]["launch_rehearsal"] is True and facts["run"]["measured_on"] != "rig"
    assert facts["run"]["facts_from"] == "agent"
    assert (tmp_path / "ocs.sqlite3").exists()
    count = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c",
         "from accounts.models import ApiKey, User; "
         "print(User.objects.count(), ApiKey.objects.count(), ApiKey.objects.filter(revoked_at=None).count())"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()
    assert count == ["2", "2", "1"]  # the same two demo users, one key per run, the previous run's revoked


def _first_request_after_start(env: dict[str, str], port: int) -> None:
    """Start the demo, send one request the moment it prints its key (as a student who was
    waiting for it would), expect 200, and stop it with Ctrl-C."""
    demo = _start_demo_in_its_own_group(env, port)
    try:
        raw_key = _read_until(demo, "OCS_API_KEY=", timeout_s=120)[-1].removeprefix("OCS_API_KEY=")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=raw_key, max_retries=0, timeout=120)
        reply = client.chat.completions.with_raw_response.create(
            model=MODEL_ID, max_tokens=8, messages=[{"role": "user", "content": "Hello!"}])
        assert reply.status_code == 200
        assert reply.parse().choices[0].message.content
    finally:
        _ctrl_c(demo)
    assert demo.returncode == 0


def _start_demo_in_its_own_group(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(port), "--workers", "1", "--slots", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def _ctrl_c(demo: subprocess.Popen[str]) -> None:
    """A terminal's Ctrl-C signals the whole foreground process group, children included."""
    os.killpg(demo.pid, signal.SIGINT)
    demo.wait(timeout=60)


def _cold_starts(env: dict[str, str]) -> int:
    return int(subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c",
         "from fleet.models import WorkerEvent; "
         "print(WorkerEvent.objects.filter(worker__name='demo-worker-1', cold_start_s__isnull=False).count())"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip())


def test_demo_stopped_with_ctrl_c_and_started_again_serves_its_first_request(tmp_path: Path) -> None:
    """Issue 9: the second run printed `healthy in 0.1 s` from the row the first run left behind
    and answered its first requests with 502 while llama-server was still loading."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OCS_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    port = free_port()
    demo = _start_demo_in_its_own_group(env, port)
    try:
        _read_until(demo, "OCS_API_KEY=", timeout_s=120)
    finally:
        _ctrl_c(demo)
    assert demo.returncode == 0
    _first_request_after_start(env, port)
    assert _cold_starts(env) == 2  # one per run, recorded as the worker's event


def test_demo_killed_outright_and_started_again_serves_its_first_request(tmp_path: Path) -> None:
    """Killed, the demo can report nothing stopped: its worker row stays `healthy`, and the
    next run must not trust it."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OCS_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    demo = _start_demo_in_its_own_group(env, free_port())
    try:
        _read_until(demo, "OCS_API_KEY=", timeout_s=120)
    finally:
        demo.kill()
        demo.wait(timeout=30)
    left = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c",
         "from fleet.models import Worker; print(Worker.objects.get(name='demo-worker-1').state)"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert left == "healthy"  # what the killed run left behind
    # A new port: the killed run's gateway is still shutting down on the old one.
    _first_request_after_start(env, free_port())
