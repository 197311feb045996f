"""Runs started from the web (/research/start/): a staff member picks a worker (measured directly,
or through the gateway), the sizes, and starts it; the runs task cluster (settings.OCS_RUNS_CLUSTER,
its own timeout and no retry) measures it and stores the run like `manage.py bench` does.

Progress reaches the page through the WebRun row: the load generator reports (done, total) from
inside its event loop, where the ORM may not be called, so a small thread writes the latest count
once a second."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from accounts.audit import audit_record
from accounts.models import User
from accounts.services import key_issue, key_revoke
from fleet.models import Worker
from research.loadgen import Target
from research.models import WebRun
from research.rig_baseline import (
    STEPS,
    BaselineOptions,
    BaselineRefused,
    BaselineRunner,
    context_sizes,
    refuse_last_healthy,
    refuse_off_rig,
)
from research.services import Workload, benchmark_run, new_group

# What a web run may ask for: enough for a real measurement, bounded so one click cannot tie up
# a rig for a day.
BOUNDS = {"prompt_tokens": (1, 32768), "output_tokens": (1, 4096), "requests": (1, 500), "concurrency": (1, 64)}
IDLE_BOUNDS_S = (0.0, 3600.0)  # a baseline's idle gaps, each
MAX_CONTEXT_BOUNDS = (64, 1_048_576)
PROMPT_SIZES = BaselineOptions().prompt_sizes
PROGRESS_EVERY_S = 1.0
WARMUP = 1  # one request first, left out of the numbers (as `manage.py bench` does)


class WebRunRefused(ValueError):
    """A run that cannot be started; the message is for the person who asked."""


@dataclass(frozen=True)
class RunAsk:
    worker_id: int
    via_gateway: bool
    prompt_tokens: int
    output_tokens: int
    requests: int
    concurrency: int
    label: str = ""
    what: str = WebRun.What.LEVEL
    idle_s: tuple[float, ...] = ()  # a baseline's idle gaps
    max_context: int | None = None  # a baseline's largest sweep prompt; None: what a slot holds


def check_ask(ask: RunAsk) -> None:
    for field, (low, high) in BOUNDS.items():
        value = getattr(ask, field)
        if not low <= value <= high:
            raise WebRunRefused(f"{field.replace('_', ' ')} must be between {low} and {high}.")
    if ask.what not in WebRun.What.values:
        raise WebRunRefused("Pick one load level or the rig baseline.")
    if any(not IDLE_BOUNDS_S[0] <= gap <= IDLE_BOUNDS_S[1] for gap in ask.idle_s) or len(ask.idle_s) > 5:
        raise WebRunRefused(f"At most 5 idle gaps, each between {IDLE_BOUNDS_S[0]:g} and {IDLE_BOUNDS_S[1]:g} s.")
    if ask.max_context is not None and not MAX_CONTEXT_BOUNDS[0] <= ask.max_context <= MAX_CONTEXT_BOUNDS[1]:
        raise WebRunRefused(f"The largest sweep prompt must be between {MAX_CONTEXT_BOUNDS[0]} and "
                            f"{MAX_CONTEXT_BOUNDS[1]} tokens.")


def _check_baseline(ask: RunAsk, worker: Worker) -> None:
    if ask.via_gateway:
        raise WebRunRefused("A baseline measures a rig's worker itself: not through the gateway.")
    try:
        refuse_off_rig(worker)
        refuse_last_healthy(worker, force=False)  # the web has no --force: a terminal does
    except BaselineRefused as exc:
        raise WebRunRefused(str(exc).replace("give --force", "run manage.py rig_baseline --force")) from None


def web_run_start(*, ask: RunAsk, by: User, gateway_url: str) -> WebRun:
    """Record the run and hand it to the runs cluster once the row is committed."""
    check_ask(ask)
    worker = Worker.objects.select_related("model").filter(pk=ask.worker_id).first()
    if worker is None or worker.state == Worker.State.DISABLED:
        raise WebRunRefused("Pick one of the workers in the list.")
    baseline = ask.what == WebRun.What.BASELINE
    if baseline:
        _check_baseline(ask, worker)
    run = WebRun.objects.create(
        requested_by=by, worker=worker, via_gateway=ask.via_gateway, what=ask.what, idle_s=list(ask.idle_s),
        max_context=ask.max_context,
        gateway_url=gateway_url.rstrip("/") if ask.via_gateway else "", model=worker.model.public_id,
        prompt_tokens=ask.prompt_tokens, output_tokens=ask.output_tokens, requests=ask.requests,
        concurrency=ask.concurrency, label=ask.label.strip()[:200],
        total_requests=len(STEPS) if baseline else ask.requests + WARMUP)
    audit_record(actor=by, action="research.run_started", subject=worker.name,
                 detail=f"web run {run.id}: {'baseline' if baseline else 'gateway' if ask.via_gateway else 'direct'}, "
                        f"{ask.prompt_tokens} in / {ask.output_tokens} out, {ask.requests} requests at {ask.concurrency}")
    transaction.on_commit(lambda: _enqueue(run.id))
    return run


def web_runs_expire() -> int:
    """Runs still marked running past the runs cluster's timeout were stopped with it (a restart,
    a kill): mark them failed so the page stops waiting. Returns how many."""
    limit = timezone.now() - timedelta(seconds=settings.OCS_RUN_TIMEOUT_S + 60)
    return WebRun.objects.filter(status=WebRun.Status.RUNNING, started_at__lt=limit).update(
        status=WebRun.Status.FAILED, ended_at=timezone.now(),
        error="the runs task cluster stopped before the run finished; start it again")


def _enqueue(web_run_id: int) -> None:
    from django_q.tasks import async_task

    async_task("research.web_runs.web_run_execute", web_run_id, cluster=settings.OCS_RUNS_CLUSTER,
               task_name=f"web-run-{web_run_id}")


class ProgressWriter:
    """Keeps the latest (done, total) and writes it to the row once a second, off the event loop."""

    def __init__(self, web_run_id: int) -> None:
        self.web_run_id = web_run_id
        self.latest: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"web-run-{web_run_id}-progress", daemon=True)

    def __call__(self, done: int, total: int) -> None:
        self.latest = (done, total)

    def __enter__(self) -> ProgressWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._write()

    def _loop(self) -> None:
        try:
            while not self._stop.wait(PROGRESS_EVERY_S):
                self._write()
        finally:
            close_old_connections()

    def _write(self) -> None:
        if self.latest is not None:
            done, total = self.latest
            WebRun.objects.filter(pk=self.web_run_id).update(done_requests=done, total_requests=total)


def web_run_execute(web_run_id: int) -> int | None:
    """The task: measure what was asked and store the run. Returns the BenchmarkRun id (None if
    it failed before a run row existed). Through the gateway it uses a key issued to the person
    who asked for this run only, revoked at the end whatever happens."""
    taken = WebRun.objects.filter(pk=web_run_id, status=WebRun.Status.QUEUED).update(
        status=WebRun.Status.RUNNING, started_at=timezone.now())
    web_run = WebRun.objects.select_related("worker__model", "requested_by").get(pk=web_run_id)
    if not taken:
        return web_run.run_id  # already taken: a task delivered twice does not measure twice
    worker = web_run.worker
    if web_run.what == WebRun.What.BASELINE:
        return _execute_baseline(web_run)
    key = None
    try:
        if worker is None:
            raise WebRunRefused("The worker was removed before the run started.")
        if web_run.via_gateway:
            if web_run.requested_by is None:
                raise WebRunRefused("The person who asked for this run no longer exists.")
            key, raw = key_issue(user=web_run.requested_by, name=f"web-run-{web_run.id}", enforce_limit=False)
            target = Target(base_url=web_run.gateway_url, model=web_run.model, api_key=raw)
        else:
            target = Target(base_url=worker.base_url, model=worker.model.public_id, api_key=worker.api_key or None)
        workload = Workload(prompt_tokens=web_run.prompt_tokens, output_tokens=web_run.output_tokens,
                            requests=web_run.requests, warmup=WARMUP, concurrency=web_run.concurrency)
        label = web_run.label or f"web run {web_run.id}: {worker.name}{' via the gateway' if key else ''}"
        with ProgressWriter(web_run.id) as progress:
            # Through the gateway the scheduler picks the worker: the run names none.
            run = benchmark_run(target=target, workload=workload, group=new_group(), label=label, scenario="web",
                                worker=None if web_run.via_gateway else worker, progress=progress,
                                is_gateway=web_run.via_gateway)
    except Exception as exc:
        WebRun.objects.filter(pk=web_run_id).update(status=WebRun.Status.FAILED, ended_at=timezone.now(),
                                                    error=f"{type(exc).__name__}: {exc}"[:2000])
        return None
    finally:
        if key is not None:
            key_revoke(key=key)
    status = WebRun.Status.DONE if run.status == run.Status.DONE else WebRun.Status.FAILED
    WebRun.objects.filter(pk=web_run_id).update(status=status, run=run, ended_at=timezone.now(), error=run.error)
    return run.id


def baseline_options(web_run: WebRun, *, context_per_slot: int) -> BaselineOptions:
    """The form's sizes as a baseline: the prompt, answer and requests of the cold, idle and warm
    steps and of llama-bench; a concurrency sweep doubling up to the asked concurrency; both prompt
    sweeps up to the largest prompt asked (or what a slot holds)."""
    levels = [1]
    while levels[-1] * 2 <= web_run.concurrency:
        levels.append(levels[-1] * 2)
    ceiling = web_run.max_context or context_per_slot
    # No ceiling asked: () lets the baseline size the context sweep from the worker's slot itself.
    contexts = [] if not web_run.max_context else [
        size for size in context_sizes(context_per_slot, output_tokens=web_run.output_tokens)
        if size <= ceiling] or [ceiling]
    return BaselineOptions(
        requests=web_run.requests, warmup=WARMUP, prompt_tokens=web_run.prompt_tokens,
        output_tokens=web_run.output_tokens, concurrency=tuple(levels), concurrency_prompt_tokens=web_run.prompt_tokens,
        prompt_sizes=tuple(size for size in PROMPT_SIZES if size <= ceiling) or (1,), contexts=tuple(contexts),
        idle_s=tuple(web_run.idle_s or BaselineOptions().idle_s), engine_prompt=(web_run.prompt_tokens,),
        engine_repetitions=min(5, web_run.requests), sweep_requests=min(5, web_run.requests))


def _execute_baseline(web_run: WebRun) -> int | None:
    """The rig baseline of the web run's worker (research/rig_baseline.py); progress in steps. Its
    report goes to the control plane's var directory (reports/), not the checkout."""
    worker = web_run.worker
    runner: BaselineRunner | None = None
    try:
        if worker is None:
            raise WebRunRefused("The worker was removed before the run started.")
        with ProgressWriter(web_run.id) as progress:
            runner = BaselineRunner(worker=worker, options=baseline_options(
                web_run, context_per_slot=int(worker.context_per_slot or 0)),
                out=lambda line: None, report_dir=settings.VAR_DIR / "reports", progress=progress)
            baseline = runner.run()
    except Exception as exc:
        stored = getattr(runner, "baseline", None)  # None when it stopped before the baseline existed
        WebRun.objects.filter(pk=web_run.id).update(status=WebRun.Status.FAILED, ended_at=timezone.now(),
                                                    baseline=stored, error=f"{type(exc).__name__}: {exc}"[:2000])
        return None
    WebRun.objects.filter(pk=web_run.id).update(status=WebRun.Status.DONE, baseline=baseline, ended_at=timezone.now())
    return None
