"""Jobs for a rig's agent: the control plane asks, the agent does the work on the rig.

A job is queued here, delivered in the answer to the agent's next heartbeat (the agent makes no
new inbound port), and reported back by the agent to /agent/v1/jobs/<id> (docs/agent-api.md).
A rig sees and reports only its own jobs. Kinds and their parameters: `JOB_PARAMS`; what the
agent does for each: fleet/agent/jobs.py."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet.models import Rig, RigJob, Worker

# The parameters each kind takes, with their types; anything else is refused before it is queued.
JOB_PARAMS: dict[str, dict[str, type | tuple[type, ...]]] = {
    RigJob.Kind.LLAMA_BENCH: {"prompt": list, "generate": int, "repetitions": int, "split_mode": list,
                              "flash_attn": list, "timeout_s": (int, float)},
    RigJob.Kind.RESTART: {"no_warmup": bool, "speculative": bool, "gpus": list, "timeout_s": (int, float)},
    RigJob.Kind.STOP: {},
    RigJob.Kind.START: {"timeout_s": (int, float)},
}
MAX_RESULT_CHARS = 65_536
SPLIT_MODES = {"none", "layer", "row"}  # llama-bench -sm


class JobRefused(ValueError):
    """A job that cannot be queued: an unknown kind or parameter, or a worker no agent runs."""


def job_request(*, worker: Worker, kind: str, params: dict[str, Any] | None = None) -> RigJob:
    """Queue a job for the agent of the worker's rig."""
    if kind not in JOB_PARAMS:
        raise JobRefused(f"unknown job kind {kind!r} (one of {', '.join(JOB_PARAMS)})")
    if worker.rig_id is None:
        raise JobRefused(f"worker {worker.name!r} is not on a rig: no agent runs it")
    params = dict(params or {})
    for name, value in params.items():
        expected = JOB_PARAMS[kind].get(name)
        if expected is None:
            raise JobRefused(f"{kind}: unknown parameter {name!r}")
        if not isinstance(value, expected) or isinstance(value, bool) and expected is not bool:
            names = "/".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
            raise JobRefused(f"{kind}: {name} must be {names}, not {value!r}")
        if name == "split_mode" and isinstance(value, list):
            if not value or not all(isinstance(mode, str) and mode in SPLIT_MODES for mode in value):
                raise JobRefused(f"{kind}: split_mode must list some of {', '.join(sorted(SPLIT_MODES))}")
        elif isinstance(value, list) and not (value and all(type(item) is int and item >= 0 for item in value)):
            raise JobRefused(f"{kind}: {name} must be a list of numbers, not {value!r}")
    if "gpus" in params and not set(params["gpus"]) <= set(worker.gpu_indices or []):
        raise JobRefused(f"{kind}: gpus {params['gpus']} are not some of {worker.name}'s {worker.gpu_indices}")
    return RigJob.objects.create(rig_id=worker.rig_id, worker=worker, kind=kind, params=params)


def job_as_sent(job: RigJob) -> dict[str, Any]:
    return {"id": job.pk, "kind": job.kind, "worker": job.worker.name, "params": job.params}


@transaction.atomic
def jobs_to_deliver(rig: Rig) -> dict[str, list[Any]]:
    """What the heartbeat's answer carries: the rig's queued jobs (now `sent`), oldest first, and
    the ids of its jobs in progress that were cancelled."""
    queued = list(RigJob.objects.select_for_update().select_related("worker")
                  .filter(rig=rig, state=RigJob.State.QUEUED).order_by("created_at", "pk"))
    now = timezone.now()
    for job in queued:
        job.state, job.sent_at = RigJob.State.SENT, now
        job.save(update_fields=["state", "sent_at"])
    cancel = list(RigJob.objects.filter(rig=rig, cancel_requested=True,
                                        state__in=[RigJob.State.SENT, RigJob.State.RUNNING])
                  .values_list("pk", flat=True))
    return {"jobs": [job_as_sent(job) for job in queued], "cancel": cancel}


@transaction.atomic
def job_report(*, rig: Rig, job_id: int, state: str, result: dict[str, Any] | None = None,
               error: str = "") -> RigJob | None:
    """The agent's report on one of its rig's jobs; None when the job is not this rig's (it is
    not told whether the id exists). A finished job's state does not change again."""
    job = RigJob.objects.select_for_update().filter(pk=job_id, rig=rig).first()
    if job is None:
        return None
    if job.finished:
        return job
    job.state = state
    if result is not None:
        job.result = result
    job.error = error[:2000]
    if job.finished:
        job.finished_at = timezone.now()
    job.save(update_fields=["state", "result", "error", "finished_at"])
    return job


def jobs_orphaned(*, rig: Rig, reason: str) -> int:
    """A rig agent that registers has just started: whatever it was doing died with the previous
    process (which restarts every worker it starts, so none stays stopped). Those jobs fail."""
    return RigJob.objects.filter(rig=rig, state__in=[RigJob.State.SENT, RigJob.State.RUNNING]).update(
        state=RigJob.State.FAILED, error=reason, finished_at=timezone.now())


def job_cancel(job: RigJob) -> None:
    """Not delivered yet: cancelled at once. In progress: the agent is told with its next heartbeat
    (it stops the work and restores the worker)."""
    if RigJob.objects.filter(pk=job.pk, state=RigJob.State.QUEUED).update(
            state=RigJob.State.CANCELLED, finished_at=timezone.now(), error="cancelled before it was sent"):
        return
    RigJob.objects.filter(pk=job.pk).exclude(
        state__in=[RigJob.State.DONE, RigJob.State.FAILED, RigJob.State.CANCELLED]).update(cancel_requested=True)


def job_wait(job: RigJob, *, timeout_s: float, poll_s: float = 0.2,
             on_poll: Callable[[RigJob], Any] | None = None,
             sleep: Callable[[float], Any] = time.sleep) -> RigJob:
    """Blocks until the job has finished (any outcome) or `timeout_s` passed; returns it as stored
    then (a job still unfinished after the timeout is returned as it is: the caller decides)."""
    deadline = time.monotonic() + timeout_s
    while True:
        job.refresh_from_db()
        if on_poll is not None:
            on_poll(job)
        if job.finished or time.monotonic() >= deadline:
            return job
        sleep(poll_s)
