"""`manage.py rig_baseline --worker NAME`: the whole sequence of docs/research/rig-baseline.md on
one rig worker, from the control plane, as one stored baseline (research.models.Baseline).

Steps, in order (each run stored with its `baseline_kind`):
engine   llama-bench on the worker's GPUs, done by the rig agent (a job: the worker is stopped
         for it and started after, whatever happens)
cold     the agent restarts the worker with llama-server's --no-warmup; the measured request is
         the first generation the new process performs (its /metrics decode count is read just
         before it: 0, or the run says it was not cold)
idle     one request, then after each gap of nothing one measured request
warm     single stream, warmed up
concurrency, prompt-size, context   the sweeps
speculative  on, then off (a restart without the draft / n-gram mode), then the worker restored;
         only where the worker has one
allocation   the warm run again on half the worker's GPUs (a restart on those cards), where the
         context plan says the model and its slots fit there; then the worker restored

The worker is drained for the baseline (no student's request lands on it) and given back to the
monitor after it; Ctrl-C or an error stops the sequence, cancels the agent's job in progress and
leaves the worker running as configured."""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import httpx
from django.utils import timezone

from fleet.models import RigJob, Worker
from fleet.rig_jobs import job_cancel, job_request, job_wait
from fleet.services import worker_drain, worker_enable
from research.bench_levels import BenchOptions, Out, bench_levels, format_level_line, idle_levels
from research.context_plan import context_plan, describe
from research.loadgen import fit_prompt_words
from research.metrics import Slo
from research.models import Baseline, BenchmarkRun
from research.rig_baseline_report import write_report
from research.selectors import worker_plan_inputs
from research.services import rehearsal_marks

STEPS = ("engine", "cold", "idle", "warm", "concurrency", "prompt-size", "context", "speculative", "allocation")
ROUTABLE = {Worker.State.HEALTHY, Worker.State.DEGRADED, Worker.State.STARTING}
RESTORE_WAIT_S = 120.0  # after Ctrl-C or an error: how long the agent may take to give the worker back


class BaselineRefused(RuntimeError):
    pass


@dataclass(frozen=True)
class BaselineOptions:
    """The sizes of each step; the defaults are rig-baseline.md's."""

    requests: int = 20
    warmup: int = 2
    prompt_tokens: int = 20
    output_tokens: int = 128
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    concurrency_prompt_tokens: int = 256
    prompt_sizes: tuple[int, ...] = (1, 8, 16, 20, 32, 64, 512)
    contexts: tuple[int, ...] = ()  # () = from the worker's context per slot (context_sizes)
    idle_s: tuple[float, ...] = (60, 300, 900)
    engine_prompt: tuple[int, ...] = (20, 512)
    engine_repetitions: int = 5
    sweep_requests: int = 5  # per prompt-size and context level
    job_timeout_s: float = 1800.0
    steps: tuple[str, ...] = STEPS
    slo: Slo | None = None

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["slo"] = {"ttft_ms": self.slo.ttft_ms, "tpot_ms": self.slo.tpot_ms} if self.slo else None
        return values


def context_sizes(context_per_slot: int, *, output_tokens: int, start: int = 8192) -> list[int]:
    """The context sweep's prompt sizes: 8k, 16k, … while a prompt and its answer fit in a slot;
    a slot smaller than 8k gets a quarter, a half and all of what fits."""
    room = context_per_slot - output_tokens - 64  # the chat template's own tokens
    if room < 64:
        return []
    sizes = []
    size = start
    while size <= room:
        sizes.append(size)
        size *= 2
    return sizes or sorted({room // 4, room // 2, room})


def context_prompts(sizes: list[int], *, per_slot: int, output_tokens: int, trained: int,
                    yarn: bool) -> tuple[list[int], list[int]]:
    """The context sweep's sizes split into (measured, left out past the trained context): a
    prompt and its answer must fit a slot, and past the model's trained context the answers are
    garbage unless the worker runs YaRN (rope_scaling = "yarn" in the rig config)."""
    fits = [size for size in sizes if size + output_tokens + 64 <= per_slot]
    beyond = [size for size in fits if trained and size + output_tokens > trained and not yarn]
    return [size for size in fits if size not in beyond], beyond


def worker_decodes(worker: Worker) -> int | None:
    """How many decode calls the worker's llama-server has made since it started (its /metrics
    `llamacpp:n_decode_total`): 0 right after a --no-warmup start. None when it does not say."""
    try:
        response = httpx.get(worker.base_url + "/metrics", timeout=5, trust_env=False,
                             headers={"Authorization": f"Bearer {worker.api_key}"} if worker.api_key else {})
    except httpx.HTTPError:
        return None
    match = re.search(r"^llamacpp:n_decode_total\s+([0-9.e+]+)$", response.text, re.MULTILINE)
    return int(float(match.group(1))) if response.status_code == 200 and match else None


def refuse_off_rig(worker: Worker) -> None:
    if worker.rig_id is None:
        raise BaselineRefused(f"{worker.name} is not on a rig: its agent does the engine and cold steps")


def refuse_last_healthy(worker: Worker, *, force: bool) -> None:
    """A baseline takes the worker out of service for its whole length: not the last healthy one
    of its pool, unless forced."""
    if force or worker.state not in {Worker.State.HEALTHY, Worker.State.DEGRADED}:
        return
    others = Worker.objects.filter(pool_id=worker.pool_id, state__in=[Worker.State.HEALTHY, Worker.State.DEGRADED]) \
        .exclude(pk=worker.pk)
    if not others.exists():
        raise BaselineRefused(f"{worker.name} is the last healthy worker of pool {worker.pool.name}: a baseline takes "
                              f"it out of service for its whole length; give --force to do it anyway")


@dataclass
class BaselineRunner:
    worker: Worker
    options: BaselineOptions
    out: Out
    report_dir: Path
    sleep: Callable[[float], Any] = time.sleep
    progress: Callable[[int, int], Any] | None = None  # (steps done, steps)
    baseline: Baseline = field(init=False)
    _job: RigJob | None = field(default=None, init=False)

    def bench(self, **changes: Any) -> BenchOptions:
        base = BenchOptions(base_url=self.worker.base_url, model=self.worker.model.public_id,
                            api_key=self.worker.api_key or None, requests=self.options.requests,
                            prompt_tokens=self.options.prompt_tokens, output_tokens=self.options.output_tokens,
                            warmup=self.options.warmup, concurrency=[1], slo=self.options.slo)
        return base.with_changes(**changes)

    # --- the sequence ---------------------------------------------------------------------

    def run(self) -> Baseline:
        refuse_off_rig(self.worker)
        self.baseline = Baseline.objects.create(
            worker=self.worker, worker_name=self.worker.name, options=self.options.as_dict(),
            rehearsal=bool(rehearsal_marks(self.worker)))
        drained = self.worker.state in ROUTABLE and worker_drain(worker=self.worker)
        steps = [step for step in STEPS if step in self.options.steps]
        try:
            for number, kind in enumerate(steps, start=1):
                if self.progress is not None:
                    self.progress(number - 1, len(steps))
                self.out(f"[{number}/{len(steps)}] {kind}")
                self._step(kind)
            if self.progress is not None:
                self.progress(len(steps), len(steps))
            self.baseline.status = Baseline.Status.DONE
        except KeyboardInterrupt:
            self.baseline.status, self.baseline.error = Baseline.Status.ABORTED, "stopped with Ctrl-C"
            raise
        except Exception as exc:
            self.baseline.status, self.baseline.error = Baseline.Status.FAILED, f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._restore(drained=drained)
            self.baseline.ended_at = timezone.now()
            self.baseline.report_path = str(write_report(self.baseline, self.report_dir, day=date.today()))
            self.baseline.save()
            self.out(f"report: {self.baseline.report_path}")
        return self.baseline

    def _restore(self, *, drained: bool) -> None:
        """Whatever stopped the sequence: the agent's job in progress is cancelled (it restarts
        the worker itself), a worker left stopped is started, and a worker this baseline drained
        goes back to the monitor (starting until its first good probe)."""
        job, self._job = self._job, None
        try:
            if job is not None and not job.finished:
                job_cancel(job)
                job = job_wait(job, timeout_s=RESTORE_WAIT_S)
                self.out(f"job {job.pk} ({job.kind}): {job.state}")
            self.worker.refresh_from_db()
            if self.worker.process_state == "stopped":
                self._agent("start", {}, wait_s=RESTORE_WAIT_S)
        except RuntimeError as exc:  # the agent away: it starts every worker when it comes back
            self.out(f"could not have the worker started again: {exc}")
        finally:
            if drained:
                self.worker.refresh_from_db()
                worker_enable(worker=self.worker)

    def _record(self, kind: str, *, runs: Sequence[int] = (), result: dict[str, Any] | None = None,
                status: str = "done", note: str = "") -> None:
        BenchmarkRun.objects.filter(pk__in=list(runs)).update(baseline=self.baseline, baseline_kind=kind)
        self.baseline.steps = [*self.baseline.steps, {"kind": kind, "status": status, "run_ids": list(runs),
                                                      "result": result or {}, "note": note}]
        self.baseline.save(update_fields=["steps"])

    def _agent(self, kind: str, params: dict[str, Any], *, wait_s: float | None = None) -> dict[str, Any]:
        """Asks the worker's rig agent for a job and waits for it (the job's own timeout and a
        minute for its heartbeats, or `wait_s`); its result, or RuntimeError."""
        params = {**params, "timeout_s": self.options.job_timeout_s}
        self._job = job = job_request(worker=self.worker, kind=kind, params=params)
        job = job_wait(job, timeout_s=wait_s if wait_s is not None else self.options.job_timeout_s + 60)
        self._job = None
        if job.state != RigJob.State.DONE:
            if not job.finished:
                job_cancel(job)
            raise RuntimeError(f"the rig agent's {kind} job {job.pk} on {self.worker.name}: "
                               f"{job.state}{': ' + job.error if job.error else ''}")
        return dict(job.result)

    def _levels(self, kind: str, report: dict[str, Any], *, result: dict[str, Any] | None = None) -> None:
        ids = [level["run_id"] for level in report.get("levels", [])]
        for level in report.get("levels", []):
            self.out(format_level_line(level))
        self._record(kind, runs=ids, result=result)

    def _step(self, kind: str) -> None:
        getattr(self, "_" + kind.replace("-", "_"))()

    def _engine(self) -> None:
        result = self._agent("llama-bench", {"prompt": list(self.options.engine_prompt),
                                             "generate": self.options.output_tokens,
                                             "repetitions": self.options.engine_repetitions})
        for row in result.get("rows", []):
            test = f"pp{row['n_prompt']}" if row.get("n_prompt") else f"tg{row.get('n_gen')}"
            self.out(f"  llama-bench {test} ({row.get('split_mode')}): {row.get('avg_ts', 0):.1f} tok/s")
        self._record("engine", result=result)

    def _cold(self) -> None:
        started = self._agent("restart", {"no_warmup": True})
        self.out(f"  restarted cold (--no-warmup): healthy after {started.get('time_to_healthy_s')} s")
        single = self.bench(requests=1, warmup=0)
        fitted = fit_prompt_words(single.target(), prompt_tokens=single.prompt_tokens)  # /tokenize: no generation
        decodes = worker_decodes(self.worker)
        # llama-server's /metrics leave its warm-up decode out: the launch says there was none,
        # the decode count that no request came first (a probe, a student, a retry).
        no_warmup = started.get("launched_no_warmup") is True
        cold_start = {"time_to_healthy_s": started.get("time_to_healthy_s"),
                      "load_duration_s": started.get("load_duration_s"), "no_warmup": no_warmup,
                      "decodes_before": decodes, "first_generation": no_warmup and decodes == 0}
        report = bench_levels(single, out=self.out, scenario="baseline-cold", label_prefix="cold",
                              cold_start=cold_start, fitted=fitted)
        if not cold_start["first_generation"]:
            self.out(f"  NOT COLD: launched with --no-warmup: {no_warmup}; decode calls before the measured "
                     f"request: {decodes}")
        self._levels("cold", report, result=cold_start)

    def _idle(self) -> None:
        report = idle_levels(self.bench(), gaps_s=list(self.options.idle_s), out=self.out, sleep=self.sleep)
        self._levels("idle", report)

    def _warm(self) -> None:
        self._levels("warm", bench_levels(self.bench(), out=self.out, scenario="baseline-warm", label_prefix="warm"))

    def _concurrency(self) -> None:
        options = self.bench(concurrency=list(self.options.concurrency),
                             prompt_tokens=self.options.concurrency_prompt_tokens)
        self._levels("concurrency", bench_levels(options, out=self.out, scenario="baseline-concurrency"))

    def _sweep(self, kind: str, sizes: list[int], *, result: dict[str, Any] | None = None) -> None:
        ids: list[int] = []
        for size in sizes:
            options = self.bench(prompt_tokens=size, requests=self.options.sweep_requests, warmup=1)
            report = bench_levels(options, out=self.out, scenario=f"baseline-{kind}", label_prefix=f"prompt {size}")
            for level in report["levels"]:
                self.out(format_level_line(level))
            ids += [level["run_id"] for level in report["levels"]]
        self._record(kind, runs=ids, result=result)

    def _prompt_size(self) -> None:
        self._sweep("prompt-size", list(self.options.prompt_sizes))

    def _context(self) -> None:
        per_slot = int(self.worker.context_per_slot or 0)
        sizes = list(self.options.contexts) or context_sizes(per_slot, output_tokens=self.options.output_tokens)
        trained = self._trained_context()
        fits, beyond = context_prompts(sizes, per_slot=per_slot, output_tokens=self.options.output_tokens,
                                       trained=trained,
                                       yarn=str((self.worker.launch or {}).get("rope_scaling") or "") == "yarn")
        plan = self._plan()
        if beyond:
            plan["note"] = (f"not measured past the trained context ({trained:,} tokens) without YaRN: "
                            f"{', '.join(str(size) for size in beyond)}")
            self.out(f"  {plan['note']}")
        if not fits:
            self._record("context", status="skipped", result=plan,
                         note=plan.get("note") or f"no prompt of {sizes} fits a {per_slot}-token slot")
            return
        self._sweep("context", fits, result=plan)
        if plan.get("note"):
            self.baseline.steps[-1]["note"] = plan["note"]
            self.baseline.save(update_fields=["steps"])

    def _trained_context(self) -> int:
        facts, _gpus, _vram = worker_plan_inputs(self.worker)
        return int(facts.context_length) if facts is not None and facts.context_length else 0

    def _plan(self) -> dict[str, Any]:
        """The context plan beside the sweep: KV per slot, the largest context that fits, 256k."""
        facts, gpus, vram = worker_plan_inputs(self.worker)
        if facts is None or not gpus or not vram:
            return {}
        try:
            plan = context_plan(facts, gpus=gpus, vram_gib=vram, slots=self.worker.slots)
        except ValueError:
            return {}
        self.out(f"  context plan: {describe(plan)}")
        return {"plan": plan.as_dict(), "plan_line": describe(plan)}

    def _speculative(self) -> None:
        launch = self.worker.launch or {}
        if not (launch.get("draft_model") or launch.get("spec_type")):
            self.out("  skipped: the worker has no draft model or n-gram mode")
            self._record("speculative", status="skipped", note="the worker has no draft model or n-gram mode")
            return
        on = bench_levels(self.bench(), out=self.out, scenario="baseline-speculative", label_prefix="speculative on")
        self._agent("restart", {"speculative": False})
        try:
            off = bench_levels(self.bench(), out=self.out, scenario="baseline-speculative",
                               label_prefix="speculative off")
        finally:
            self._agent("restart", {})  # as configured again
        self._levels("speculative", {"levels": on["levels"] + off["levels"]})

    def _allocation(self) -> None:
        gpus = list(self.worker.gpu_indices or [])
        if len(gpus) < 2:
            self._record("allocation", status="skipped", note="the worker has one GPU or none: nothing to split")
            return
        half = gpus[: len(gpus) // 2]
        facts, _gpus, vram = worker_plan_inputs(self.worker)
        per_slot = int(self.worker.context_per_slot or 0)
        if facts is not None and vram:
            plan = context_plan(facts, gpus=len(half), vram_gib=vram, slots=self.worker.slots)
            if plan.largest_context_per_slot < per_slot:
                note = (f"the model and {self.worker.slots} slot(s) of {per_slot:,} tokens do not fit on {len(half)} "
                        f"card(s): at most {plan.largest_context_per_slot:,} per slot (context plan)")
                self.out(f"  skipped: {note}")
                self._record("allocation", status="skipped", note=note)
                return
        self._agent("restart", {"gpus": half})
        try:
            report = bench_levels(self.bench(), out=self.out, scenario="baseline-allocation",
                                  label_prefix=f"{len(half)} of {len(gpus)} GPUs", launch={"gpu_indices": half})
        finally:
            self._agent("restart", {})  # on all its cards again
        self._levels("allocation", report, result={"gpus": half, "compare_with": "warm"})
