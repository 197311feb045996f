"""Research state changes: running a benchmark level and storing it, GPU telemetry during a run."""
from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from accounts.models import User
from fleet.models import Gpu, Pool, Worker
from fleet.rigs import rig_measuring
from fleet.services import worker_move
from research.gate import BaselineShape, gate_decide
from research.gpu_summary import summarize_gpus
from research.loadgen import LevelResult, ProgressFn, Sample, Target, prompt_text, run_level, shared_prefix_prompt
from research.metrics import Slo, mean_or_none, summarize
from research.models import BenchmarkRun, Experiment, GpuSample, PoolSlo, PromotionCheck, RequestSample

log = logging.getLogger("ocs.research")
Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Workload:
    """What one level sends. `words`: prompt words per request (calibrated to prompt_tokens);
    `prefix_words` > 0 gives every request the same long prefix (prefix reuse)."""

    prompt_tokens: int
    output_tokens: int
    requests: int
    warmup: int = 0
    concurrency: int | None = None
    rate: float | None = None
    words: int | None = None
    prefix_words: int = 0
    seed: int = 0

    def prompts(self) -> list[Messages]:
        words = self.words if self.words is not None else max(self.prompt_tokens - 20, 1)
        built: list[Messages] = []
        for index in range(self.warmup + self.requests):
            seed = self.seed * 100_000 + 1000 + index  # distinct per request and per level
            if self.prefix_words:
                text = shared_prefix_prompt(prefix_words=self.prefix_words, suffix_words=max(words - self.prefix_words, 1),
                                            seed=seed)
            else:
                text = prompt_text(words=words, seed=seed)
            built.append([{"role": "user", "content": text}])
        return built


def new_group() -> str:
    return uuid.uuid4().hex[:12]


def server_props(base_url: str, api_key: str | None = None) -> dict[str, Any]:
    """llama-server's /props (build, context, slots, model path); {} from a gateway or on error."""
    try:
        response = httpx.get(base_url.rstrip("/") + "/props", timeout=10,
                             headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        data = response.json() if response.status_code == 200 else {}
        return data if isinstance(data, dict) else {}
    except (httpx.HTTPError, ValueError):
        return {}


def launch_from_props(props: dict[str, Any]) -> dict[str, Any]:
    """What /props says of how the server runs: context, slots, model file, build."""
    settings = props.get("default_generation_settings") or {}
    found = {
        "context": settings.get("n_ctx") or props.get("n_ctx"),
        "slots": props.get("total_slots"),
        "model_path": props.get("model_path"),
        "build": props.get("build_info"),
        "speculative": {key: value for key, value in (settings.get("params") or {}).items()
                        if key.startswith("speculative")} or None,
    }
    return {key: value for key, value in found.items() if value not in (None, "", {})}


MEASURING_AHEAD_S = 10.0  # a run that dies stops asking for fast readings within this


class TelemetryRecorder:
    """Looks at the rig agent's latest GPU report (fleet.Gpu rows) every `interval_s` while a run
    goes on and keeps each reading once, dated by when the agent took it (`Gpu.sampled_at`);
    readings taken before the run started are left out. While it records, the rig's agent is asked
    for a heartbeat (a reading) every second (fleet.rigs.rig_measuring), whatever its own
    heartbeat_s; a run shorter than a second may get none. A row with no reading time (an older
    agent) is kept once."""

    def __init__(self, *, worker: Worker | None, interval_s: float = 1.0) -> None:
        self.worker = worker
        self.interval_s = interval_s
        self.rows: list[dict[str, Any]] = []
        self.started_at = timezone.now()
        self._seen: set[tuple[int, Any]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _gpus(self) -> list[Gpu]:
        if self.worker is None or self.worker.rig_id is None:
            return []
        gpus = Gpu.objects.filter(rig_id=self.worker.rig_id).select_related("rig")
        if self.worker.gpu_indices:
            gpus = gpus.filter(index__in=list(self.worker.gpu_indices))
        return list(gpus)

    def sample_once(self) -> int:
        """Keeps the readings not seen before; returns how many were new."""
        now = timezone.now()
        new = 0
        for gpu in self._gpus():
            reading = (gpu.pk, gpu.sampled_at)
            if reading in self._seen or (gpu.sampled_at is not None and gpu.sampled_at < self.started_at):
                continue
            self._seen.add(reading)
            new += 1
            self.rows.append({
                "at": gpu.sampled_at or now, "rig": gpu.rig.name, "gpu_index": gpu.index, "name": gpu.name,
                "utilization_pct": gpu.utilization_pct, "memory_used_mib": gpu.memory_used_mib,
                "memory_total_mib": gpu.memory_total_mib, "power_w": gpu.power_w,
                "temperature_c": gpu.temperature_c, "sm_clock_mhz": gpu.sm_clock_mhz,
                "pcie_gen": gpu.pcie_gen, "pcie_width": gpu.pcie_width,
                "pcie_max_gen": gpu.pcie_max_gen, "pcie_max_width": gpu.pcie_max_width,
            })
        return new

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                assert self.worker is not None and self.worker.rig_id is not None
                try:
                    rig_measuring(rig_id=self.worker.rig_id, for_s=MEASURING_AHEAD_S)  # readings every second
                except DatabaseError:  # SQLite busy with the gateway's writes: the agent keeps its own pace
                    log.debug("could not ask rig %s for readings every second", self.worker.rig_id)
                self.sample_once()
                self._stop.wait(self.interval_s)
        finally:
            close_old_connections()

    def __enter__(self) -> "TelemetryRecorder":
        self.started_at = timezone.now()
        if self.worker is not None and self.worker.rig_id is not None:
            self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def level_summary(result: LevelResult, *, run: BenchmarkRun, slo: Slo | None) -> dict[str, Any]:
    """The JSON of one level, as `bench --json` writes it (ms, tokens/s, requests/s)."""
    measured = result.measured
    summary = summarize([s.timing for s in measured], duration_s=result.duration_s, slo=slo)
    ok = [s for s in measured if s.timing.ok]
    drafts = sum(s.draft_n or 0 for s in ok)
    accepted = sum(s.draft_n_accepted or 0 for s in ok)
    return {
        "run_id": run.pk,
        "label": run.label,
        "concurrency": run.concurrency,
        "request_rate": run.request_rate,
        "requests": len(measured),
        "completed": summary.completed,
        "failed": summary.failed,
        "warmup_dropped": len(result.samples) - len(measured),
        "duration_s": summary.duration_s,
        "prompt_tokens_mean": mean_or_none([s.timing.prompt_tokens for s in ok]),
        "output_tokens_mean": mean_or_none([s.timing.output_tokens for s in ok]),
        "ttft_ms": summary.ttft_ms.as_dict(),
        "tpot_ms": summary.tpot_ms.as_dict(),
        "inter_chunk_latency_ms": summary.inter_chunk_latency_ms.as_dict(),
        "e2e_ms": summary.e2e_ms.as_dict(),
        "request_throughput": summary.request_throughput,
        "output_throughput": summary.output_throughput,
        "prompt_eval_rate": mean_or_none([s.prompt_per_second for s in ok if s.prompt_per_second is not None]),
        "generation_rate": mean_or_none([s.predicted_per_second for s in ok if s.predicted_per_second is not None]),
        "cached_tokens_mean": mean_or_none([float(s.cached_tokens) for s in ok if s.cached_tokens is not None]),
        "draft_acceptance": (accepted / drafts) if drafts else None,
        "goodput": summary.goodput,
        "good_requests": summary.good_requests,
        "slo": {"ttft_ms": summary.slo.ttft_ms, "tpot_ms": summary.slo.tpot_ms},
        "errors": sorted({s.error for s in measured if s.error})[:5],
    }


def _sample_row(run: BenchmarkRun, sample: Sample, origin_s: float) -> RequestSample:
    timing = sample.timing
    ttft = timing.ttft_s
    tpot = timing.tpot_s
    return RequestSample(
        run=run, index=sample.index, warmup=sample.warmup, ok=timing.ok, error=sample.error[:300],
        sent_ms=(timing.sent_s - origin_s) * 1000, ttft_ms=None if ttft is None else ttft * 1000,
        e2e_ms=timing.e2e_s * 1000, tpot_ms=None if tpot is None else tpot * 1000,
        inter_chunk_gaps_ms=[round(gap * 1000, 3) for gap in timing.inter_chunk_gaps_s],
        prompt_tokens=timing.prompt_tokens,
        output_tokens=timing.output_tokens, cached_tokens=sample.cached_tokens,
        prompt_per_second=sample.prompt_per_second, predicted_per_second=sample.predicted_per_second,
        draft_n=sample.draft_n, draft_n_accepted=sample.draft_n_accepted,
    )


def worker_for_url(base_url: str) -> Worker | None:
    return Worker.objects.filter(base_url__in=[base_url.rstrip("/"), base_url.rstrip("/") + "/"]).first()


def rehearsal_marks(worker: Worker | None) -> dict[str, Any]:
    """What a run keeps in its launch when its worker is on a rehearsal rig: {"rig", "rehearsal":
    True}, else {}. Kept with the run, since its GPU readings were made up (fleet/agent/rehearsal.py):
    it shows as a rehearsal and never counts as rig evidence, whatever the rig does later."""
    rig = worker.rig if worker is not None and worker.rig_id is not None else None
    return {"rig": rig.name, "rehearsal": True} if rig is not None and rig.rehearsal else {}


def benchmark_run(
    *,
    target: Target,
    workload: Workload,
    group: str,
    label: str = "",
    scenario: str = "",
    slo: Slo | None = None,
    launch: dict[str, Any] | None = None,
    worker: Worker | None = None,
    experiment: Experiment | None = None,
    progress: ProgressFn | None = None,
    is_gateway: bool | None = None,
) -> BenchmarkRun:
    """Runs one load level against `target`, stores the run, its samples and the GPU telemetry
    of the worker's GPUs taken meanwhile. The run row exists (status running) before the first
    request; an exception marks it failed with the error and is raised again."""
    props = server_props(target.base_url, target.api_key)
    gateway = is_gateway if is_gateway is not None else bool(target.api_key) and not props
    worker = worker or (None if gateway else worker_for_url(target.base_url))
    full_launch: dict[str, Any] = {}
    if worker is not None:
        full_launch.update({"worker": worker.name, "gpu_indices": worker.gpu_indices, "slots": worker.slots,
                            **(worker.launch or {})})
    full_launch.update(launch_from_props(props))
    full_launch.update(launch or {})
    full_launch.update(rehearsal_marks(worker))
    run = BenchmarkRun.objects.create(
        experiment=experiment, group=group, scenario=scenario, label=label,
        target=BenchmarkRun.Target.GATEWAY if gateway else BenchmarkRun.Target.WORKER,
        base_url=target.base_url, worker=worker, model=target.model, launch=full_launch,
        llama_build=str(full_launch.get("build") or ""), prompt_tokens=workload.prompt_tokens,
        output_tokens=workload.output_tokens, concurrency=workload.concurrency, request_rate=workload.rate,
        requests=workload.requests, warmup=workload.warmup,
        slo_ttft_ms=slo.ttft_ms if slo else None, slo_tpot_ms=slo.tpot_ms if slo else None,
    )
    try:
        with TelemetryRecorder(worker=worker) as telemetry:
            result = asyncio.run(run_level(
                target, prompts=workload.prompts(), output_tokens=workload.output_tokens,
                concurrency=workload.concurrency, rate=workload.rate, warmup=workload.warmup,
                seed=workload.seed, progress=progress,
            ))
    except Exception as exc:
        run.status = BenchmarkRun.Status.FAILED
        run.error = f"{type(exc).__name__}: {exc}"[:2000]
        run.ended_at = timezone.now()
        run.save(update_fields=["status", "error", "ended_at"])
        raise
    RequestSample.objects.bulk_create([_sample_row(run, s, result.started_s) for s in result.samples])
    GpuSample.objects.bulk_create([GpuSample(run=run, **row) for row in telemetry.rows])
    run.summary = level_summary(result, run=run, slo=slo)
    run.summary["gpus"] = summarize_gpus(telemetry.rows)
    measured_ok = run.summary["completed"]
    run.status = BenchmarkRun.Status.DONE if measured_ok else BenchmarkRun.Status.FAILED
    if not measured_ok:
        run.error = "no request completed: " + "; ".join(run.summary["errors"])
    run.ended_at = timezone.now()
    run.save(update_fields=["summary", "status", "error", "ended_at"])
    return run


# --- the promotion gate and the nightly baseline ------------------------------------------------

BASELINE = Workload(prompt_tokens=256, output_tokens=64, requests=8, warmup=1, concurrency=1)


def latest_run(*, worker: Worker) -> BenchmarkRun | None:
    return BenchmarkRun.objects.filter(worker_id=worker.id).exclude(status=BenchmarkRun.Status.RUNNING).first()


def shape_mismatches(run: BenchmarkRun, shape: BaselineShape) -> list[str]:
    return shape.mismatches(prompt_tokens=run.prompt_tokens, output_tokens=run.output_tokens,
                            concurrency=run.concurrency, request_rate=run.request_rate, requests=run.requests)


def latest_baseline_run(*, worker: Worker, shape: BaselineShape, scan: int = 200) -> BenchmarkRun | None:
    """The worker's latest finished run (direct, not through the gateway) of `shape`; None when
    none of its last `scan` runs is."""
    runs = BenchmarkRun.objects.filter(worker_id=worker.id, target=BenchmarkRun.Target.WORKER).exclude(
        status=BenchmarkRun.Status.RUNNING)[:scan]
    return next((run for run in runs if not shape_mismatches(run, shape)), None)


def baseline_workload(shape: BaselineShape) -> Workload:
    return Workload(prompt_tokens=shape.prompt_tokens, output_tokens=shape.output_tokens,
                    requests=shape.min_requests, warmup=1, concurrency=shape.concurrency)


def promotion_check(*, worker: Worker, pool: Pool, actor: User | None = None) -> PromotionCheck:
    """The gate: moves `worker` into `pool` only if its latest finished run of the pool's
    baseline shape meets the pool's SLOs; runs of other shapes are not judged (the reasons say
    so when the worker's latest run is one). Every check is recorded with the run it judged,
    its numbers and reasons, passed or not."""
    slo = PoolSlo.objects.filter(pool_id=pool.id).first()
    shape = slo.shape() if slo else BaselineShape()
    run = latest_baseline_run(worker=worker, shape=shape)
    ttft = run.metric("ttft_ms", "p90") if run else None
    tpot = run.metric("tpot_ms", "p90") if run else None
    decision = gate_decide(
        slo_ttft_p90_ms=slo.ttft_p90_ms if slo else None, slo_tpot_p90_ms=slo.tpot_p90_ms if slo else None,
        has_run=run is not None, run_ok=run is not None and run.status == BenchmarkRun.Status.DONE,
        ttft_p90_ms=ttft, tpot_p90_ms=tpot,
    )
    reasons = list(decision.reasons)
    newest = latest_run(worker=worker)
    if run is None and newest is not None:
        reasons.append(f"its latest run ({newest.pk}) is not of the baseline shape {shape.describe()}: "
                       + "; ".join(shape_mismatches(newest, shape)))
    check = PromotionCheck.objects.create(
        worker=worker, pool=pool, run=run, passed=decision.passed, ttft_p90_ms=ttft, tpot_p90_ms=tpot,
        slo_ttft_p90_ms=slo.ttft_p90_ms if slo else None, slo_tpot_p90_ms=slo.tpot_p90_ms if slo else None,
        reasons=reasons,
    )
    if decision.passed and worker.pool_id != pool.id:
        worker_move(worker=worker, pool=pool, actor=actor)
        check.moved = True
        check.save(update_fields=["moved"])
    return check


def baseline_run(*, worker: Worker, scenario: str = "nightly-baseline", workload: Workload = BASELINE) -> BenchmarkRun:
    """The fixed baseline workload against one worker directly (256 in / 64 out, one stream)."""
    target = Target(base_url=worker.base_url, model=worker.model.public_id, api_key=worker.api_key or None)
    return benchmark_run(target=target, workload=workload, group=new_group(), label=f"baseline {worker.name}",
                         scenario=scenario, worker=worker)
