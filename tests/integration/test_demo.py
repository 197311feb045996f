"""The front door: `manage.py demo` comes up, prints its contract lines, serves, and stops cleanly."""
from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

from tests.conftest import MODEL_ID, ROOT, _free_port

pytestmark = pytest.mark.integration


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


def test_demo_serves_a_streamed_answer_and_stops_everything_it_started(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OCS_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    port = _free_port()
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(port), "--workers", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        lines = _read_until(demo, "OCS_API_KEY=", timeout_s=120)
        worker_pids = [int(m.group(1)) for line in lines if (m := re.search(r"pid (\d+)\)", line))]
        assert len(worker_pids) == 2
        assert f"OCS_BASE_URL=http://127.0.0.1:{port}/v1" in lines
        raw_key = lines[-1].removeprefix("OCS_API_KEY=")
        assert re.fullmatch(r"ocs-[a-z0-9]{10}-[A-Za-z0-9]{40}", raw_key)
        assert any("demo-teacher password: " in line for line in lines)

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=raw_key, max_retries=0)
        text = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model=MODEL_ID, stream=True, max_tokens=16, messages=[{"role": "user", "content": "Hello!"}]
            )
            if chunk.choices
        )
        assert text.strip()
    finally:
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=30)
    assert demo.returncode == 0
    deadline = time.monotonic() + 10
    while any(_pid_alive(pid) for pid in worker_pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_pid_alive(pid) for pid in worker_pids), "llama-server left running after the demo stopped"


def test_demo_again_reuses_the_database_and_issues_a_new_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OCS_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    keys = []
    for _ in range(2):
        demo = subprocess.Popen(
            [sys.executable, "manage.py", "demo", "--port", str(_free_port()), "--workers", "0"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        try:
            keys.append(_read_until(demo, "OCS_API_KEY=", timeout_s=60)[-1])
        finally:
            demo.send_signal(signal.SIGINT)
            demo.wait(timeout=30)
        assert demo.returncode == 0
    assert keys[0] != keys[1]
    assert (tmp_path / "ocs.sqlite3").exists()
    count = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c",
         "from accounts.models import ApiKey, User; print(User.objects.count(), ApiKey.objects.count())"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()
    assert count == ["2", "2"]  # the same two demo users, one key per run
