"""What a worker the rig agent launches sees in its environment: its GPUs numbered as NVML
numbers them (CUDA_DEVICE_ORDER=PCI_BUS_ID), and its key in a file only the agent's user can read,
never on its command line. A stand-in binary records the environment and its arguments; no GPU
or llama-server needed."""
from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from fleet.agent.config import WorkerConfig
from fleet.agent.supervisor import WorkerSupervisor


KEY = "ocswk-abcdefghij-" + "k" * 40


def _stand_in(tmp_path: Path) -> Path:
    binary = tmp_path / "llama-server"
    binary.write_text('#!/bin/sh\necho "$@" > "$OCS_TEST_ENV_DUMP.args"\n'
                      'env > "$OCS_TEST_ENV_DUMP.tmp" && mv "$OCS_TEST_ENV_DUMP.tmp" "$OCS_TEST_ENV_DUMP"\n'
                      "exec sleep 30\n")
    binary.chmod(0o755)
    return binary


def _env_of_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: tuple[int, ...]) -> dict[str, str]:
    dump = tmp_path / f"env-{len(gpus)}.txt"
    binary = _stand_in(tmp_path)
    monkeypatch.setenv("OCS_TEST_ENV_DUMP", str(dump))
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")  # whatever the rig's shell had
    supervisor = WorkerSupervisor(WorkerConfig(name="w", model_id="m", port=18999, model_path="/m.gguf", gpus=gpus),
                                  host="127.0.0.1", binary=binary, key_dir=tmp_path / "keys")
    try:
        supervisor.set_api_key(KEY)
        supervisor.tick()
        deadline = time.monotonic() + 10
        while not dump.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        supervisor.stop()
    return dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)


def test_a_gpu_worker_sees_its_gpus_in_pci_bus_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env_of_launch(tmp_path, monkeypatch, (4, 5, 6))
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["CUDA_VISIBLE_DEVICES"] == "4,5,6"


def test_a_cpu_worker_sees_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env_of_launch(tmp_path, monkeypatch, ())
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_worker_waits_for_its_key_then_gets_it_in_a_private_file_never_on_argv(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = tmp_path / "env.txt"
    monkeypatch.setenv("OCS_TEST_ENV_DUMP", str(dump))
    supervisor = WorkerSupervisor(WorkerConfig(name="w", model_id="m", port=18998, model_path="/m.gguf"),
                                  host="127.0.0.1", binary=_stand_in(tmp_path), key_dir=tmp_path / "keys")
    try:
        assert supervisor.tick() == "stopped" and supervisor.process is None  # not registered: no key yet
        supervisor.set_api_key(KEY)
        assert supervisor.tick() == "starting"
        deadline = time.monotonic() + 10
        while not dump.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        args = Path(str(dump) + ".args").read_text().split()
        key_file = Path(args[args.index("--api-key-file") + 1])
        assert KEY not in " ".join(args) and "--api-key" not in args
        assert key_file.read_text() == KEY + "\n"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        first_pid = supervisor.process.pid if supervisor.process else None
        supervisor.set_api_key(KEY.replace("k", "n"))  # registered again: a new key, a new process
        assert supervisor.process is not None and supervisor.process.pid != first_pid
        assert key_file.read_text() == KEY.replace("k", "n") + "\n"
    finally:
        supervisor.stop()
