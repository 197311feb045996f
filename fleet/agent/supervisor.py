"""Keeps one logical worker's llama-server running on a rig: start, notice a crash, restart
with exponential backoff. `tick()` does one step and never blocks for long, so the agent's
round stays short; tests drive it directly. A job (fleet/agent/jobs.py, its own thread) may
`hold` the worker stopped and `release` it, under the same lock as `tick`."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from fleet.agent.config import WorkerConfig
from fleet.gguf import gguf_report
from fleet.local_worker import LlamaServerProcess, LlamaServerSpec, find_default_model, load_duration_s
from fleet.worker_keys import worker_key_write

log = logging.getLogger("ocs.agent")

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
STABLE_AFTER_S = 60.0  # running this long resets the backoff
PRUNE_EVERY_S = 30.0  # how often a running worker's slot files are kept within their budget


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
        slot_files_max_bytes: int | None = None,
    ) -> None:
        """`slot_files_max_bytes`: the budget of the worker's slot files (students' saved prompts,
        one file each), pruned oldest first every PRUNE_EVERY_S while it runs; None: not pruned."""
        self.worker = worker
        self.slot_files_max_bytes = slot_files_max_bytes
        self.pruned_at = 0.0
        self.slot_files_pruned = 0  # files deleted by pruning since the agent started
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
        self.lock = threading.RLock()
        self.held = False  # a job stopped it: it stays stopped until the job releases it
        self.launched_gpus: tuple[int, ...] = tuple(worker.gpus)  # the running process's cards

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
        with self.lock:
            self._set_api_key(api_key)

    def _set_api_key(self, api_key: str) -> None:
        if api_key == self.api_key:
            return
        if api_key:
            if self.key_path is None:
                raise ValueError(f"worker {self.worker.name}: no key_dir to keep its key in")
            self.spec = replace(self.spec, api_key_file=worker_key_write(self.key_path, api_key))
        else:
            self.spec = replace(self.spec, api_key_file=None)
        self.api_key = api_key
        if self.process is not None and not self.held:
            self.process.stop()
            self.process = None
            self._start(self.clock())

    def tick(self) -> str:
        with self.lock:
            return self._tick()

    def _tick(self) -> str:
        now = self.clock()
        if self.api_key is None or self.held:
            return self.state  # not registered yet (no key to launch it with), or a job holds it
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
        if self.state == "running" and self.slot_files_max_bytes is not None and now - self.pruned_at >= PRUNE_EVERY_S:
            self.pruned_at = now
            pruned = len(self.process.prune_slot_files(self.slot_files_max_bytes))
            if pruned:
                self.slot_files_pruned += pruned
                log.info("%s: %d slot files pruned to keep within %.1f GB (%d since the agent started)",
                         self.worker.name, pruned, self.slot_files_max_bytes / 1e9, self.slot_files_pruned)
        return self.state

    def _start(self, now: float, spec: LlamaServerSpec | None = None, gpus: tuple[int, ...] | None = None) -> None:
        self.launched_gpus = tuple(gpus) if gpus is not None else tuple(self.worker.gpus)
        self.process = LlamaServerProcess(spec or self.spec, log_path=self.log_path, binary=self.binary,
                                          gpus=self.launched_gpus).start()
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

    def hold(self) -> bool:
        """Stop the llama-server and keep it stopped (a job needs the GPUs, or was asked to stop
        it). Returns whether it was already held."""
        with self.lock:
            was_held, self.held = self.held, True
            self.stop()
            return was_held

    def release(self, *, no_warmup: bool = False, speculative: bool = True,
                gpus: tuple[int, ...] | None = None) -> None:
        """Start it now and supervise it again. This launch only: `no_warmup` adds llama-server's
        `--no-warmup` (no warm-up decode at load: the first generation is the first request's),
        `speculative=False` leaves out the draft model and n-gram mode, `gpus` (some of the
        worker's own) launches it on those cards alone, without its tensor split. A crash
        relaunches the configured worker."""
        with self.lock:
            self.held = False
            self.stop()
            if self.api_key is None:
                return  # not registered yet: tick launches it once it has its key
            options = self.spec.options
            if not speculative:
                options = replace(options, draft_model=None, spec_type=None)
            if no_warmup:
                options = replace(options, extra_args=(*options.extra_args, "--no-warmup"))
            if gpus is not None:
                if not gpus or not set(gpus) <= set(self.worker.gpus):
                    raise ValueError(f"worker {self.worker.name}: GPUs {list(gpus)} are not some of its own "
                                     f"{list(self.worker.gpus)}")
                options = replace(options, tensor_split=())
            self._start(self.clock(), replace(self.spec, options=options), gpus=gpus)

    def wait_healthy(self, *, timeout_s: float, cancelled: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """Blocks (a job's thread) until the process just started answers /health; returns the
        seconds from its launch to healthy and its load duration from its log."""
        with self.lock:
            process, started_at = self.process, self.started_at
        if process is None:
            raise RuntimeError(f"worker {self.worker.name}: no llama-server was started")
        process.wait_healthy(timeout_s, cancelled=cancelled)
        return {"time_to_healthy_s": round(self.clock() - (started_at or self.clock()), 3),
                "load_duration_s": load_duration_s(self.log_path), "pid": process.pid,
                # as launched (its /metrics do not count a warm-up decode: only this says)
                "launched_no_warmup": "--no-warmup" in process.spec.options.extra_args,
                "gpus": list(self.launched_gpus)}

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
            "slot_files_pruned": self.slot_files_pruned,
            "last_exit_code": self.last_exit_code,
            # Seconds since this process was launched: the control plane dates the cold start
            # from it without trusting the rig's wall clock.
            "uptime_s": round(self.clock() - self.started_at, 3)
            if self.process is not None and self.started_at is not None else None,
        }
