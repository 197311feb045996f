"""The rig agent's side of jobs (the control plane's: fleet/rig_jobs.py). Jobs arrive in the
heartbeat's answer and run one at a time on a thread of their own, so heartbeats go on while a
llama-bench runs. Each is reported back: running, then done / failed / cancelled with its result.

A worker holds its VRAM while it runs, so `llama-bench` stops the worker first and starts it
after, whatever happens: an error, a cancel, a timeout. (An agent that dies meanwhile starts every
worker when it starts again, and the control plane fails the job it lost.)"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.agent.supervisor import WorkerSupervisor
from fleet.local_worker import Cancelled, find_llama_bench, run_llama_bench

log = logging.getLogger("ocs.agent")
Report = Callable[[int, dict[str, Any]], None]
DEFAULT_TIMEOUT_S = 600.0
# What a llama-bench row keeps (its -o json has ~40 fields per test).
BENCH_FIELDS = ("n_prompt", "n_gen", "avg_ts", "stddev_ts", "avg_ns", "split_mode", "flash_attn", "n_gpu_layers",
                "n_threads", "model_size", "model_n_params", "model_type", "build_commit", "gpu_info",
                "cpu_info", "backends", "test_time")


@dataclass
class AgentJob:
    id: int
    kind: str
    worker: str
    params: dict[str, Any]
    cancel: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def from_answer(cls, row: dict[str, Any]) -> "AgentJob":
        return cls(id=int(row["id"]), kind=str(row["kind"]), worker=str(row["worker"]),
                   params=dict(row.get("params") or {}))

    def timeout_s(self) -> float:
        return float(self.params.get("timeout_s") or DEFAULT_TIMEOUT_S)


def bench_command(binary: Path, supervisor: WorkerSupervisor, params: dict[str, Any]) -> list[str]:
    """llama-bench on the worker's own model, GPUs and threads (-o json), with the job's sizes."""
    options = supervisor.spec.options

    def listed(name: str, default: list[Any]) -> str:
        return ",".join(str(value) for value in (params.get(name) or default))

    command = [str(binary), "-m", str(supervisor.spec.model_path),
               "-p", listed("prompt", [20, 512]), "-n", str(int(params.get("generate") or 128)),
               "-r", str(int(params.get("repetitions") or 5)),
               "-sm", listed("split_mode", [options.split_mode or "layer"]), "-fa", listed("flash_attn", [0]),
               "-ngl", str(options.n_gpu_layers if options.n_gpu_layers is not None else 99), "-o", "json"]
    if options.threads:
        command += ["-t", str(options.threads)]
    if options.tensor_split:
        command += ["-ts", "/".join(f"{share:g}" for share in options.tensor_split)]
    return command


class JobRunner:
    def __init__(self, supervisors: list[WorkerSupervisor], report: Report) -> None:
        self.supervisors = {s.worker.name: s for s in supervisors}
        self.report = report
        self._queue: queue.Queue[AgentJob | None] = queue.Queue()
        self._known: dict[int, AgentJob] = {}
        self._thread: threading.Thread | None = None
        self.current: AgentJob | None = None

    def offer(self, answer: dict[str, Any]) -> None:
        """The heartbeat's answer: new jobs are queued (one delivered twice runs once), cancelled
        ones are told to stop."""
        for row in answer.get("jobs") or []:
            try:
                job = AgentJob.from_answer(row)
            except (KeyError, TypeError, ValueError):
                log.warning("a job the agent cannot read: %r", row)
                continue
            if job.id in self._known:
                continue
            self._known[job.id] = job
            self._queue.put(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="ocs-agent-jobs", daemon=True)
                self._thread.start()
        for job_id in answer.get("cancel") or []:
            known = self._known.get(job_id)
            if known is not None:
                known.cancel.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """The agent is stopping: cancel everything and wait for the job in progress to restore
        its worker."""
        for job in self._known.values():
            job.cancel.set()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self.current = job
            try:
                self._run(job)
            finally:
                self.current = None

    def _send(self, job: AgentJob, body: dict[str, Any]) -> None:
        try:
            self.report(job.id, body)
        except Exception as exc:  # the control plane away: the job's outcome is in the agent's log
            log.warning("job %s: could not report %s: %s", job.id, body.get("state"), exc)

    def _run(self, job: AgentJob) -> None:
        if job.cancel.is_set():
            self._send(job, {"state": "cancelled", "error": "cancelled before it started"})
            return
        handler = HANDLERS.get(job.kind)
        supervisor = self.supervisors.get(job.worker)
        if handler is None or supervisor is None:
            what = f"unknown job kind {job.kind!r}" if handler is None else f"no worker {job.worker!r} on this rig"
            self._send(job, {"state": "failed", "error": what})
            return
        self._send(job, {"state": "running"})
        log.info("job %s: %s on %s %s", job.id, job.kind, job.worker, job.params)
        try:
            result = handler(self, job, supervisor)
        except Cancelled:
            self._send(job, {"state": "cancelled", "error": "cancelled; the worker was restored"})
        except Exception as exc:
            log.warning("job %s failed: %s", job.id, exc)
            self._send(job, {"state": "failed", "error": str(exc)[:2000]})
        else:
            self._send(job, {"state": "done", "result": result})

    # --- the kinds ------------------------------------------------------------------------

    def _started(self, job: AgentJob, supervisor: WorkerSupervisor, **launch: Any) -> dict[str, Any]:
        started_wall = time.time()
        try:
            supervisor.release(**launch)
        except ValueError:
            supervisor.release()  # a launch it refuses: the worker runs as configured
            raise
        try:
            facts = supervisor.wait_healthy(timeout_s=job.timeout_s(), cancelled=job.cancel.is_set)
        except TimeoutError:
            if job.cancel.is_set():  # it goes on starting, supervised as ever
                raise Cancelled() from None
            raise
        return {**facts, "started_at": round(started_wall, 3),
                **{name: value for name, value in launch.items() if name != "gpus"}}

    def _stop(self, job: AgentJob, supervisor: WorkerSupervisor) -> dict[str, Any]:
        supervisor.hold()
        return {"process_state": "stopped"}

    def _start(self, job: AgentJob, supervisor: WorkerSupervisor) -> dict[str, Any]:
        return self._started(job, supervisor)

    def _restart(self, job: AgentJob, supervisor: WorkerSupervisor) -> dict[str, Any]:
        gpus = job.params.get("gpus")
        supervisor.hold()
        return self._started(job, supervisor, no_warmup=bool(job.params.get("no_warmup")),
                             speculative=bool(job.params.get("speculative", True)),
                             gpus=tuple(int(g) for g in gpus) if gpus is not None else None)

    def _llama_bench(self, job: AgentJob, supervisor: WorkerSupervisor) -> dict[str, Any]:
        command = bench_command(find_llama_bench(supervisor.binary), supervisor, job.params)
        was_held = supervisor.hold()
        started = time.monotonic()
        try:
            rows = run_llama_bench(command, gpus=supervisor.worker.gpus, cancel=job.cancel, timeout_s=job.timeout_s())
            wall_s = time.monotonic() - started
        finally:
            restored: dict[str, Any] = {}
            if not was_held:  # a worker a job had stopped stays stopped; any other runs again
                supervisor.release()
                restored = supervisor.wait_healthy(timeout_s=job.timeout_s())
        return {"rows": [{k: row.get(k) for k in BENCH_FIELDS if k in row} for row in rows],
                "argv": command[1:], "gpus": list(supervisor.worker.gpus), "wall_s": round(wall_s, 3),
                "restored": restored}


HANDLERS: dict[str, Callable[[JobRunner, AgentJob, WorkerSupervisor], dict[str, Any]]] = {
    "stop": JobRunner._stop,
    "start": JobRunner._start,
    "restart": JobRunner._restart,
    "llama-bench": JobRunner._llama_bench,
}
