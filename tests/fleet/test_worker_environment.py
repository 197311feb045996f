"""What a worker the rig agent launches sees in its environment: its GPUs numbered as NVML
numbers them (CUDA_DEVICE_ORDER=PCI_BUS_ID). A stand-in binary records the environment; no
GPU or llama-server needed."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleet.agent.config import WorkerConfig
from fleet.agent.supervisor import WorkerSupervisor


def _env_of_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: tuple[int, ...]) -> dict[str, str]:
    dump = tmp_path / f"env-{len(gpus)}.txt"
    binary = tmp_path / "llama-server"
    binary.write_text('#!/bin/sh\nenv > "$OCS_TEST_ENV_DUMP.tmp" && mv "$OCS_TEST_ENV_DUMP.tmp" "$OCS_TEST_ENV_DUMP"\n'
                      "exec sleep 30\n")
    binary.chmod(0o755)
    monkeypatch.setenv("OCS_TEST_ENV_DUMP", str(dump))
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")  # whatever the rig's shell had
    supervisor = WorkerSupervisor(WorkerConfig(name="w", model_id="m", port=18999, model_path="/m.gguf", gpus=gpus),
                                  host="127.0.0.1", binary=binary)
    try:
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
