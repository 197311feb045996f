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
    # It dumps its argv and environment only where a test asks (OCS_TEST_ENV_DUMP): unset, the
    # dump would land in the working directory, the checkout itself.
    binary.write_text('#!/bin/sh\nif [ -n "$OCS_TEST_ENV_DUMP" ]; then\n'
                      '  echo "$@" > "$OCS_TEST_ENV_DUMP.args"\n'
                      '  env > "$OCS_TEST_ENV_DUMP.tmp" && mv "$OCS_TEST_ENV_DUMP.tmp" "$OCS_TEST_ENV_DUMP"\n'
                      "fi\nexec sleep 30\n")
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


def _slot_file(directory: Path, name: str, size: int, age_s: float) -> None:
    import os

    path = directory / name
    path.write_bytes(b"k" * size)
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_slot_files_are_kept_within_their_budget_oldest_first(tmp_path: Path) -> None:
    from fleet.local_worker import prune_slot_files

    _slot_file(tmp_path, "ocs-old.bin", 100, age_s=300)
    _slot_file(tmp_path, "ocs-mid.bin", 200, age_s=200)
    _slot_file(tmp_path, "ocs-new.bin", 300, age_s=100)
    assert prune_slot_files(tmp_path, 600) == []  # within the budget: nothing goes
    assert prune_slot_files(tmp_path, 500) == ["ocs-old.bin"]
    assert prune_slot_files(tmp_path, 300) == ["ocs-mid.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ocs-new.bin"]
    assert prune_slot_files(tmp_path / "gone", 1) == []  # the worker stopped and its directory went


def test_a_running_worker_has_its_slot_files_pruned_every_half_minute(tmp_path: Path) -> None:
    """The supervisor prunes the live process's own slot directory (the one it passed as
    --slot-save-path) while the worker runs, at most every PRUNE_EVERY_S; the directory itself
    goes when the worker stops."""
    from fleet.agent.supervisor import PRUNE_EVERY_S

    now = [1000.0]
    supervisor = WorkerSupervisor(WorkerConfig(name="w", model_id="m", port=18997, model_path="/m.gguf"),
                                  host="127.0.0.1", binary=_stand_in(tmp_path), key_dir=tmp_path / "keys",
                                  clock=lambda: now[0], slot_files_max_bytes=250)
    try:
        supervisor.set_api_key(KEY)
        supervisor.tick()
        assert supervisor.process is not None and supervisor.process.slot_dir is not None
        slot_dir = supervisor.process.slot_dir
        supervisor.state = "running"  # the stand-in answers no /health
        _slot_file(slot_dir, "ocs-a.bin", 200, age_s=60)
        _slot_file(slot_dir, "ocs-b.bin", 200, age_s=10)
        supervisor.tick()
        assert sorted(p.name for p in slot_dir.iterdir()) == ["ocs-b.bin"]
        _slot_file(slot_dir, "ocs-c.bin", 200, age_s=0)
        now[0] += PRUNE_EVERY_S / 2
        supervisor.tick()
        assert len(list(slot_dir.iterdir())) == 2  # not yet: at most every PRUNE_EVERY_S
        now[0] += PRUNE_EVERY_S
        supervisor.tick()
        assert sorted(p.name for p in slot_dir.iterdir()) == ["ocs-c.bin"]
        assert supervisor.slot_files_pruned == 2
        assert supervisor.report()["slot_files_pruned"] == 2  # in every heartbeat, for the fleet view
    finally:
        supervisor.stop()
    assert not slot_dir.exists()
