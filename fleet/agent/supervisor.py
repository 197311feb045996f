"""Keeps one logical worker's llama-server running on a rig: start, notice a crash, restart
with exponential backoff. `tick()` does one step and never blocks for long, so the agent's
round stays short; tests drive it directly."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from fleet.agent.config import WorkerConfig
from fleet.gguf import gguf_report
from fleet.local_worker import LlamaServerProcess, LlamaServerSpec, find_default_model
from fleet.worker_keys import worker_key_write

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
STABLE_AFTER_S = 60.0  # running this long resets the backoff


def spec_for(worker: WorkerConfig, *, host: str) -> LlamaServerSpec:
    return LlamaServerSpec(
        model_path=Path(worker.model_path) if worker.model_path else find_default_model(),
        model_id=worker.model_id,
        host=host,
        port=worker.port,
        context=worker.context,
        slots=worker.slots,
        options=worker.options,
    )


class WorkerSupervisor:
    """States: stopped -> starting -> running; on exit -> backoff -> starting …

    The process is launched only once the control plane has given the worker its key
    (`set_api_key`, on registration), with `--api-key-file`: a worker never runs open."""

    def __init__(
        self,
        worker: WorkerConfig,
        *,
        host: str,
        binary: Path | None = None,
        log_dir: Path | None = None,
        key_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.worker = worker
        self.spec = spec_for(worker, host=host)
        self.key_path = (key_dir / f"{worker.name}.key") if key_dir else None
        self.api_key: str | None = None  # None: not given yet, the process waits for it
        self.binary = binary
        self.log_path = (log_dir / f"{worker.name}.log") if log_dir else None
        self.clock = clock
        self.state = "stopped"
        self.process: LlamaServerProcess | None = None
        self.restarts = 0
        self.failures_in_a_row = 0
        self.last_exit_code: int | None = None
        self.next_start_at = 0.0
        self.running_since: float | None = None
        self.started_at: float | None = None  # clock() when the current process was launched
        self._gguf: dict[str, Any] | None = None
        self._gguf_read = False

    def gguf(self) -> dict[str, Any] | None:
        """The model file's facts (fleet/gguf.py), read once: what the control plane's roofline
        and context plan work from, since it does not have the file."""
        if not self._gguf_read:
            self._gguf, self._gguf_read = gguf_report(self.spec.model_path), True
        return self._gguf

    def set_api_key(self, api_key: str) -> None:
        """The worker's key from the control plane (a new one on each registration). Written to
        its 0600 file; a running llama-server, which read its file when it started, is restarted
        at once on the new key (the control plane already sends only the new one). "" (a control
        plane that sends none): launched without a key."""
        if api_key == self.api_key:
            return
        if api_key:
            if self.key_path is None:
                raise ValueError(f"worker {self.worker.name}: no key_dir to keep its key in")
            self.spec = replace(self.spec, api_key_file=worker_key_write(self.key_path, api_key))
        else:
            self.spec = replace(self.spec, api_key_file=None)
        self.api_key = api_key
        if self.process is not None:
            self.process.stop()
            self.process = None
            self._start(self.clock())

    def tick(self) -> str:
        now = self.clock()
        if self.api_key is None:
            return self.state  # not registered yet: no key to launch it with
        if self.process is None:
            if now >= self.next_start_at:
                self._start(now)
            return self.state
        exit_code = self.process.process.poll() if self.process.process else None
        if exit_code is not None:
            self._exited(exit_code, now)
            return self.state
        if self.state == "starting" and self._healthy():
            self.state, self.running_since = "running", now
        if self.state == "running" and self.running_since and now - self.running_since >= STABLE_AFTER_S:
            self.failures_in_a_row = 0
        return self.state

    def _start(self, now: float) -> None:
        self.process = LlamaServerProcess(self.spec, log_path=self.log_path, binary=self.binary,
                                          gpus=self.worker.gpus).start()
        if self.state in {"backoff", "crashed"}:
            self.restarts += 1
        self.state, self.running_since, self.started_at = "starting", None, now

    def _exited(self, exit_code: int, now: float) -> None:
        self.last_exit_code = exit_code
        self.process = None
        self.failures_in_a_row += 1
        backoff = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self.failures_in_a_row - 1))
        self.next_start_at = now + backoff
        self.state = "backoff"

    def _healthy(self) -> bool:
        try:  # /health answers without the key (fleet/worker_keys.py)
            return httpx.get(self.spec.base_url + "/health", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        self.state = "stopped"

    def report(self) -> dict[str, Any]:
        return {
            "name": self.worker.name,
            "process_state": self.state,
            "pid": self.process.pid if self.process else None,
            "restarts": self.restarts,
            "last_exit_code": self.last_exit_code,
            # Seconds since this process was launched: the control plane dates the cold start
            # from it without trusting the rig's wall clock.
            "uptime_s": round(self.clock() - self.started_at, 3)
            if self.process is not None and self.started_at is not None else None,
        }
