"""The rig agent: one round = (register if needed) + supervise every worker + heartbeat.
Talks to the control plane over HTTPS with its rig token; needs no database."""
from __future__ import annotations

import logging
import os
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fleet.agent.config import AgentConfig
from fleet.agent.jobs import JobRunner
from fleet.agent.rehearsal import RehearsalRig, WorkerProcess
from fleet.agent.supervisor import WorkerSupervisor
from fleet.agent.telemetry import GpuSample, read_gpus

AGENT_VERSION = "ocs-agent/1"
log = logging.getLogger("ocs.agent")


class ReportRefused(httpx.HTTPError):
    """The control plane refused a register or heartbeat (4xx); `detail` is its reason, e.g.
    "report refused: workers[0].context_per_slot: Ensure this value is greater than or equal to 512."."""

    def __init__(self, *, path: str, status_code: int, detail: str) -> None:
        super().__init__(f"{path} refused with {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else response.text[:500]


@dataclass
class RoundResult:
    registered: bool
    gpu_status: str
    gpus: list[GpuSample]
    workers: list[dict[str, Any]]
    errors: list[str] = field(default_factory=list)


class RigAgentRunner:
    def __init__(
        self,
        config: AgentConfig,
        *,
        http: httpx.Client | None = None,
        telemetry: Callable[[], tuple[str, list[GpuSample]]] | None = None,
    ) -> None:
        """`telemetry`: what reads the GPUs each round; by default NVML (read_gpus), or on a
        rehearsal rig (`telemetry = "rehearsal"`) NVML faked from the workers' processes."""
        self.config = config
        # trust_env=False: no proxy from the environment; the CA is the config's ca_file (a
        # private or self-signed one), or the system's.
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=config.ca_file) if config.ca_file else True
        self.http = http or httpx.Client(timeout=10, trust_env=False, verify=verify)
        self.rehearsal_rig = RehearsalRig(rig_name=config.rig_name) if config.rehearsal else None
        self.telemetry = telemetry or (self._rehearsal_telemetry if config.rehearsal else read_gpus)
        self.registered = False
        log_dir = Path(config.log_dir) if config.log_dir else None
        binary = Path(config.llama_server) if config.llama_server else None
        # The workers' key files: the config's key_dir, or a directory of this run's own (0700),
        # removed when the agent stops. Keys come anew with every registration.
        self._own_key_dir = None if config.key_dir else Path(tempfile.mkdtemp(prefix="ocs-agent-keys-"))
        key_dir = Path(config.key_dir) if config.key_dir else self._own_key_dir
        self.supervisors = [
            WorkerSupervisor(worker, host=config.address, binary=binary, log_dir=log_dir, key_dir=key_dir,
                             slot_files_max_bytes=int(config.slot_files_gb * 1e9))
            for worker in config.workers
        ]
        self.pace_s: float | None = None  # the control plane's heartbeat_s while it measures this rig
        self._post_lock = threading.Lock()  # the jobs' thread reports beside the rounds
        self.jobs = JobRunner(self.supervisors, self._report_job)

    def _rehearsal_telemetry(self) -> tuple[str, list[GpuSample]]:
        assert self.rehearsal_rig is not None
        workers = [WorkerProcess(pid=s.process.pid if s.process is not None else None, gpus=s.launched_gpus,
                                 threads=s.worker.options.threads or os.cpu_count() or 1)
                   for s in self.supervisors]
        return read_gpus(self.rehearsal_rig.nvml(workers))

    def _report_job(self, job_id: int, body: dict[str, Any]) -> None:
        self._post(f"/agent/v1/jobs/{job_id}", body)

    def _heartbeat(self, *, gpu_status: str, gpus: list[GpuSample], workers: list[dict[str, Any]]) -> httpx.Response:
        return self._post("/agent/v1/heartbeat", {
            "gpu_status": gpu_status, "gpus": [g.as_dict() for g in gpus], "workers": workers,
            "sent_at": round(time.time(), 3),
            # A rehearsal rig says so in every heartbeat: the control plane marks it, and its
            # runs are never taken for measurements of GPUs.
            "rehearsal": self.config.rehearsal,
        })

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        with self._post_lock:
            response = self.http.post(
                self.config.control_plane_url + path, json=body,
                headers={"Authorization": f"Bearer {self.config.token}"},
            )
        if response.is_client_error:
            raise ReportRefused(path=path, status_code=response.status_code, detail=_detail(response))
        response.raise_for_status()
        return response

    def register(self) -> None:
        workers = [
            {
                "name": s.worker.name, "model_id": s.worker.model_id, "port": s.worker.port,
                "slots": s.worker.slots, "context_per_slot": s.worker.context // s.worker.slots,
                "pool": s.worker.pool, "lane_tokens": s.worker.lane_tokens, "gpus": list(s.worker.gpus),
                "launch": s.worker.launch_summary(),
                "gguf": s.gguf(),
            }
            for s in self.supervisors
        ]
        answer = self._post("/agent/v1/register", {"agent_version": AGENT_VERSION, "workers": workers})
        try:
            keys = {row["name"]: str(row.get("api_key") or "") for row in answer.json()["workers"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise httpx.DecodingError(f"/agent/v1/register: an answer without its workers ({exc})") from None
        for supervisor in self.supervisors:
            # Each worker is launched (or relaunched) with the key the control plane now holds.
            supervisor.set_api_key(keys.get(supervisor.worker.name, ""))
        self.registered = True

    def run_round(self) -> RoundResult:
        errors: list[str] = []
        if not self.registered:
            try:
                self.register()
            except httpx.HTTPError as exc:
                errors.append(f"register: {exc}")
        for supervisor in self.supervisors:  # workers run even while the control plane is unreachable
            try:
                supervisor.tick()
            except OSError as exc:
                errors.append(f"{supervisor.worker.name}: {exc}")
        gpu_status, gpus = self.telemetry()
        reports = [s.report() for s in self.supervisors]
        if self.registered:
            try:
                answer = self._heartbeat(gpu_status=gpu_status, gpus=gpus, workers=reports)
            except httpx.HTTPError as exc:
                errors.append(f"heartbeat: {exc}")
            else:
                self._take_jobs(answer)
        for error in errors:
            # A refusal will not pass by retrying: the rig's config must change. Say so loudly.
            log.log(logging.ERROR if " refused with " in error else logging.WARNING, "%s", error)
        return RoundResult(registered=self.registered, gpu_status=gpu_status, gpus=gpus, workers=reports,
                           errors=errors)

    def _take_jobs(self, answer: httpx.Response) -> None:
        """The heartbeat's answer carries jobs for this rig (fleet/agent/jobs.py); an older
        control plane's answer has none."""
        try:
            body = answer.json()
        except ValueError:
            return
        if isinstance(body, dict):
            self.jobs.offer(body)
            pace = body.get("heartbeat_s")
            self.pace_s = float(pace) if isinstance(pace, (int, float)) and not isinstance(pace, bool) else None

    def next_wait_s(self) -> float:
        """Seconds until the next round: the config's heartbeat_s, or less (never under 0.2 s) while
        the control plane measures this rig and asks for readings more often."""
        if self.pace_s is None:
            return self.config.heartbeat_s
        return max(0.2, min(self.config.heartbeat_s, self.pace_s))

    def stop(self) -> None:
        self.jobs.stop()
        for supervisor in self.supervisors:
            supervisor.stop()
        if self._own_key_dir is not None:
            shutil.rmtree(self._own_key_dir, ignore_errors=True)
        if self.registered:
            try:
                gpu_status, gpus = self.telemetry()
                self._heartbeat(gpu_status=gpu_status, gpus=gpus, workers=[s.report() for s in self.supervisors])
            except httpx.HTTPError:
                pass
