"""deploy/systemd/: each unit passes `systemd-analyze verify` (systemd 252 runs it in this
container without a running systemd), with its paths pointed at this checkout; and each has the
hardening and stop behaviour the deployment relies on."""
from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.deploy_files import ROOT, UNITS

INSTALL_DIR = "/opt/ocs"
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes", "ProtectHome": "yes"}


def read_unit(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(path.read_text())
    return parser


def test_the_five_roles_have_units() -> None:
    assert {p.name for p in UNITS} == {"ocs-gateway@.service", "ocs-fleet-monitor.service",
                                       "ocs-qcluster.service", "ocs-qcluster-runs.service", "ocs-rig-agent.service"}


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_passes_systemd_analyze_verify(unit: Path, tmp_path: Path) -> None:
    """The unit as shipped, with /opt/ocs replaced by a directory whose .venv/bin/python is this
    interpreter (verify checks that ExecStart's program exists). Any warning fails the test."""
    checkout = tmp_path / "ocs"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").symlink_to(sys.executable)
    text = unit.read_text()
    assert INSTALL_DIR in text
    (tmp_path / "units").mkdir()
    copy = tmp_path / "units" / unit.name
    copy.write_text(text.replace(INSTALL_DIR, str(checkout)))
    target = copy
    if unit.name.endswith("@.service"):
        target = copy.with_name(unit.name.replace("@.service", "@8001.service"))
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (Debian package systemd)"
    result = subprocess.run([analyze, "verify", "--man=no", str(target)], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "SYSTEMD_LOG_LEVEL": "info"})
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, output
    assert not [line for line in output.splitlines() if unit.name in line or copy.name in line], output


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_is_hardened_and_restarts_on_failure(unit: Path) -> None:
    service = read_unit(unit)["Service"]
    for key, value in HARDENING.items():
        assert service.get(key) == value, f"{unit.name}: {key}={service.get(key)}"
    assert service.get("User") == "ocs"
    assert service.get("Restart") == "on-failure"
    assert service.get("ReadWritePaths"), "ProtectSystem=strict needs its writable paths listed"
    assert service.get("WorkingDirectory") == INSTALL_DIR
    assert service.get("ExecStart", "").startswith(f"{INSTALL_DIR}/.venv/bin/python ")


def test_gateway_unit_runs_the_redacting_gateway_on_its_instance_port() -> None:
    service = read_unit(ROOT / "deploy" / "systemd" / "ocs-gateway@.service")["Service"]
    command = service["ExecStart"].split()
    assert command[1:3] == ["-m", "ocsweb.gateway"]  # uvicorn (or daphne) with keys redacted, graceful stop
    assert command[command.index("-p") + 1] == "%i"
    assert command[command.index("-b") + 1] == "127.0.0.1"  # only nginx reaches it
    # The gateway waits up to UNWIND_GRACE_S for requests to unwind, then flushes its log.
    from ocsweb.gateway import UNWIND_GRACE_S

    assert int(service["TimeoutStopSec"]) >= UNWIND_GRACE_S + 10
    assert service["EnvironmentFile"] == "/etc/ocs/ocs.env"


def test_control_plane_units_use_the_commands_that_exist() -> None:
    from django.core.management import get_commands

    commands = get_commands()
    for name in ("ocs-fleet-monitor.service", "ocs-qcluster.service", "ocs-qcluster-runs.service",
                 "ocs-rig-agent.service"):
        command = read_unit(ROOT / "deploy" / "systemd" / name)["Service"]["ExecStart"].split()
        assert command[1] == "manage.py" and command[2] in commands, name


def test_rig_agent_keeps_the_gpus_reachable_and_stops_its_workers_itself() -> None:
    service = read_unit(ROOT / "deploy" / "systemd" / "ocs-rig-agent.service")["Service"]
    assert service.get("PrivateDevices", "no") == "no"  # /dev/nvidia*
    assert "MemoryDenyWriteExecute" not in service  # CUDA compiles kernels at run time
    assert service["KillMode"] == "mixed"  # SIGTERM to the agent only; it stops its llama-servers
    assert "/var/log/ocs" in service["ReadWritePaths"]  # [llama_server] log_dir of rig.example.toml
    # slot files can take many GB (docs/classroom.md): their TMPDIR is the writable var directory
    assert "Environment=TMPDIR=/var/lib/ocs" in (ROOT / "deploy" / "systemd" / "ocs-rig-agent.service").read_text()
    assert "/var/lib/ocs" in service["ReadWritePaths"]
