"""The one place the lessons read the research app (benchmark runs and their roofline).

`research.models.BenchmarkRun` has `status` ("running" | "done" | "failed"), `scenario` ("nightly-baseline", "cold-vs-warm",
"concurrency-sweep", "slots-sweep", "context-sweep", "speculative", "allocation", "prefix-reuse",
"engine-only", or "" for a plain `bench`), `model`, `launch` (the worker's launch configuration,
including its llama-server argv), `started_at`, `ended_at`, and `summary`: the level's
`bench --json` (`ttft_ms` {p50, p90, p99, mean}, `generation_rate`, `prompt_eval_rate` in tokens/s,
and `roofline` {`ceiling_tok_s`, `percent_of_ceiling`, …} when the model file and GPU bandwidth are
known); a run's page is `/research/runs/<id>/`.
While research has no runs, every function here returns None or [] and the pages say "no
benchmark yet". Everything else in this app works with `BenchmarkFact`, so a change
of names there means editing `_fact()` and `_load_runs()` only. Missing names read as None.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet.models import Gpu
from lessons.run_evidence import measured_on
from research.models import BenchmarkRun, GpuSample

# Scenario names as the research app's `bench --scenario` and nightly job store them (older
# spellings accepted too).
SCENARIOS_BASELINE = frozenset({"nightly-baseline", "baseline"})
SCENARIOS_COLD = frozenset({"cold-vs-warm", "cold-warm"})
SCENARIOS_ALLOCATION = frozenset({"allocation"})
SCENARIOS_YARN = frozenset({"context-sweep", "context", "yarn"})


@dataclass(frozen=True)
class BenchmarkFact:
    """One finished benchmark run, as the lessons show it. Rates in tokens/s, times in ms."""

    run_id: int
    scenario: str
    model: str
    finished_at: datetime | None
    ttft_ms_p50: float | None
    generation_rate: float | None
    prompt_eval_rate: float | None
    ceiling_tokens_per_s: float | None
    url: str
    yarn: bool = False
    measured_on: str = "cpu"  # rig | rehearsal | cpu (lessons/run_evidence.py)
    rig: str = ""  # the measured worker's rig
    layout: str = ""  # which worker and GPUs: one logical-worker layout
    gpu_samples: int = 0

    @property
    def percent_of_ceiling(self) -> float | None:
        if not self.generation_rate or not self.ceiling_tokens_per_s:
            return None
        return 100.0 * self.generation_rate / self.ceiling_tokens_per_s


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _uses_yarn(launch: Any) -> bool:
    """The worker was launched with YaRN rope scaling (a `rope_scaling` option or `--rope-scaling yarn`)."""
    return isinstance(launch, dict) and "yarn" in repr(sorted(launch.items(), key=str)).lower()


def _gpus_of(launch: Any) -> str:
    gpus = (launch.get("gpu_indices") or launch.get("gpus")) if isinstance(launch, dict) else None
    return ",".join(str(g) for g in gpus) if isinstance(gpus, list) else ""


def _fact(run: Any, *, uuids: dict[tuple[str, int], str] | None = None) -> BenchmarkFact:
    summary = getattr(run, "summary", None)
    summary = summary if isinstance(summary, dict) else {}
    ttft = summary.get("ttft_ms")
    roof = summary.get("roofline")
    roof = roof if isinstance(roof, dict) else {}
    return BenchmarkFact(
        run_id=run.pk, scenario=str(getattr(run, "scenario", "") or ""), model=str(getattr(run, "model", "") or ""),
        finished_at=getattr(run, "ended_at", None) or getattr(run, "started_at", None),
        ttft_ms_p50=_number(ttft.get("p50")) if isinstance(ttft, dict) else _number(ttft),
        generation_rate=_number(summary.get("generation_rate")),
        prompt_eval_rate=_number(summary.get("prompt_eval_rate")),
        ceiling_tokens_per_s=_number(roof.get("ceiling_tok_s")),
        url=f"/research/runs/{run.pk}/",
        yarn=_uses_yarn(getattr(run, "launch", None)),
        **_measured(run, uuids or {}),
    )


def _measured(run: Any, uuids: dict[tuple[str, int], str]) -> dict[str, Any]:
    worker = getattr(run, "worker", None)
    rig = worker.rig.name if worker is not None and getattr(worker, "rig", None) is not None else ""
    samples = list(getattr(run, "sampled", []))  # (rig name, GPU index) of its GPU samples
    launch = getattr(run, "launch", None)
    rehearsal = isinstance(launch, dict) and launch.get("rehearsal") is True
    return {"measured_on": measured_on(rig=rig, sampled_gpu_uuids=[uuids.get(key, "") for key in samples],
                                       rehearsal=rehearsal),
            "rig": rig, "gpu_samples": len(samples),
            "layout": f"{worker.name if worker is not None else '-'}:{_gpus_of(getattr(run, 'launch', None))}"}


def _load_runs(limit: int) -> list[BenchmarkFact]:
    """Finished runs, newest first, each with the (rig, GPU index) of its GPU samples. Probes
    (the fair share's, the live-state client's, the two back ends judged) measure the gateway's
    own workings, not the workers: left out."""
    runs = list(BenchmarkRun.objects.filter(status="done").exclude(kind=BenchmarkRun.Kind.PROBE)
                .select_related("worker__rig")
                .order_by("-started_at", "-id")[:limit])
    sampled: dict[int, set[tuple[str, int]]] = {}
    for run_id, rig, index in GpuSample.objects.filter(run__in=runs).values_list("run_id", "rig", "gpu_index"):
        sampled.setdefault(run_id, set()).add((rig, index))
    for run in runs:
        run.sampled = sorted(sampled.get(run.pk, set()))  # type: ignore[attr-defined]
    uuids = {(rig, index): uuid for rig, index, uuid in Gpu.objects.values_list("rig__name", "index", "uuid")}
    return [_fact(run, uuids=uuids) for run in runs]


def benchmark_runs(limit: int = 200) -> list[BenchmarkFact] | None:
    """Finished runs, newest first; None when the research app cannot be read (not built yet)."""
    return _load_runs(limit)


def latest_benchmark() -> BenchmarkFact | None:
    runs = benchmark_runs(limit=1)
    return runs[0] if runs else None


def runs_of(runs: Iterable[BenchmarkFact], scenarios: Iterable[str]) -> list[BenchmarkFact]:
    wanted = set(scenarios)
    return [run for run in runs if run.scenario in wanted]
