"""Several gateway processes without Redis refuse to start, with a clear message (issue 9, item 8)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from core.gateway_guard import processes_problem
from fleet.local_worker import free_port
from tests.conftest import ROOT


def gateway(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ocsweb.gateway", "-b", "127.0.0.1", "-p", str(port), "ocsweb.asgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "OCS_ENV"}}
    env.update(OCS_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", **extra)
    return env


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_declared_processes_need_redis() -> None:
    assert processes_problem(processes=1, redis_url=None) is None
    assert processes_problem(processes=4, redis_url="redis://127.0.0.1:6379/0") is None
    problem = processes_problem(processes=4, redis_url=None)
    assert problem and "REDIS_URL" in problem and "4 times their limits" in problem


def test_a_gateway_declared_one_of_several_without_redis_refuses_to_start(tmp_path: Path) -> None:
    process = gateway(base_env(tmp_path, OCS_GATEWAY_PROCESSES="3"), free_port())
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "gateway refuses to start: OCS_GATEWAY_PROCESSES=3 but REDIS_URL is not set" in output
    assert "Traceback" not in output


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs the Redis back end")
def test_with_redis_several_declared_gateway_processes_start(tmp_path: Path) -> None:
    port = free_port()
    process = gateway(base_env(tmp_path, OCS_GATEWAY_PROCESSES="3", REDIS_URL=settings.REDIS_URL), port)
    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_second_production_gateway_without_redis_refuses_to_start(tmp_path: Path) -> None:
    env = base_env(tmp_path, OCS_ENV="production", OCS_SECRET_KEY="s" * 40, OCS_ALLOWED_HOSTS="localhost")
    first_port = free_port()
    first = gateway(env, first_port)
    try:
        deadline = time.monotonic() + 60
        while not listening(first_port):
            assert first.poll() is None, first.stdout.read() if first.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
        second = gateway(env, free_port())
        output, _ = second.communicate(timeout=60)
        assert second.returncode == 2
        assert f"another gateway process (pid {first.pid}) already runs here without REDIS_URL" in output
    finally:
        first.terminate()
        first.wait(timeout=30)
    again = gateway(env, first_port)  # the lock went with the process that held it
    try:
        deadline = time.monotonic() + 60
        while not listening(first_port):
            assert again.poll() is None, again.stdout.read() if again.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        again.terminate()
        again.wait(timeout=30)
