"""A local llama-server started and registered as a worker: the embedded default's worker,
used by `serve_worker`, `demo` and the integration tests."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
from django.conf import settings
from django.utils import timezone

from fleet.local_worker import (
    DEFAULT_MODEL_ID,
    LaunchOptions,
    LlamaServerProcess,
    LlamaServerSpec,
    context_options,
    find_default_model,
    local_threads,
)
from fleet.models import Worker
from fleet.services import RESTARTABLE_STATES, worker_register, worker_set_state
from fleet.worker_keys import worker_key_headers, worker_key_new, worker_key_write

PER_SLOT_CONTEXT = 4096
# Prompt tokens per step of the local worker's loop; None: llama-server's own (2,048). llama-server
# builds each step from every slot's prompt chunks in slot order, and a slot's next token comes
# only when a step ends. A smaller step lets a short question in slot 0 through sooner (measured
# on one CPU thread beside three 1,400-token prefills: first token 20.8 s with 2,048, 2.6 s with
# 256; 12 tokens in 21.9 s with 256, 6.9 s with 64), but in a class it starved the higher slots'
# prefills (64: an agent's first turn waited 101 s; turns completed fell from 117 to 72), and 512
# against 2,048 was inside the class replay's noise over 12 runs, so the demo keeps the default
# (docs/classroom.md); `demo --batch-size N` sets it.
BATCH_SIZE: int | None = None


def local_launch_options(context_per_slot: int, *, batch_size: int | None = BATCH_SIZE) -> LaunchOptions:
    """How a worker on this machine is launched (the demo's, the tests'): threads beside the
    gateway, `batch_size` (prompt tokens per step; None: llama-server's own), YaRN past the native
    context (ValueError past its reach)."""
    return context_options(context_per_slot, base=LaunchOptions(threads=local_threads(), batch_size=batch_size))


def local_worker_spec(*, port: int, slots: int, model_id: str = DEFAULT_MODEL_ID,
                      context_per_slot: int = PER_SLOT_CONTEXT) -> LlamaServerSpec:
    return LlamaServerSpec(
        model_path=find_default_model(),
        model_id=model_id,
        port=port,
        slots=slots,
        context=context_per_slot * slots,
        options=local_launch_options(context_per_slot),
    )


def per_slot_context(base_url: str, api_key: str = "") -> int | None:
    try:
        props = httpx.get(base_url + "/props", timeout=3, headers=worker_key_headers(api_key)).json()
        return int(props["default_generation_settings"]["n_ctx"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def local_worker_start(
    *, name: str, port: int, pool: str, slots: int, log_dir: Path | None = None, timeout_s: float = 120.0
) -> tuple[LlamaServerProcess, Worker, float]:
    """Start llama-server, wait for /health, register it healthy. Returns (process, worker, seconds to healthy).
    A row left `healthy` by a run that could not mark it stopped (killed, or its database gone)
    turns `starting` before the new process launches: the gateway sends it nothing while it loads.
    Each start gets a new key (its file under OCS_VAR_DIR/worker-keys, 0600), as a rig's worker does."""
    api_key = worker_key_new()
    key_file = worker_key_write(Path(settings.VAR_DIR) / "worker-keys" / f"{name}.key", api_key)
    spec = replace(local_worker_spec(port=port, slots=slots), api_key_file=key_file)
    log_path = (log_dir / f"{name}.log") if log_dir else None
    stale = Worker.objects.filter(name=name, state__in=RESTARTABLE_STATES).first()
    if stale is not None:
        worker_set_state(worker=stale, state=Worker.State.STARTING,
                         reason="process restarting: starting until a probe says it serves")
    started_at = timezone.now()
    process = LlamaServerProcess(spec, log_path=log_path).start()
    try:
        seconds = process.wait_healthy(timeout_s)
    except BaseException:
        process.stop()
        raise
    worker = worker_register(
        name=name,
        base_url=spec.base_url,
        model_id=spec.model_id,
        pool_name=pool,
        slots=slots,
        context_length=per_slot_context(spec.base_url, api_key) or PER_SLOT_CONTEXT,
        state=Worker.State.HEALTHY,
        process_started_at=started_at,
        api_key=api_key,
    )
    if process.pid is not None:
        worker.process_pid = process.pid
        worker.save(update_fields=["process_pid"])
    return process, worker, seconds


def local_worker_stop(*, process: LlamaServerProcess, worker: Worker, reason: str) -> None:
    process.stop()
    worker.refresh_from_db()
    worker_set_state(worker=worker, state=Worker.State.DOWN, reason=reason)
