"""The one place the lessons read the research app (benchmark runs and the roofline).

The research instrument is built in parallel; until it has runs (or models) every function
here returns None and the pages say "no benchmark yet". Everything else in this app works
with `BenchmarkFact`, so wiring the real models means editing `_load_runs()` only.

Expected (the research-instrument issue): `research.models.BenchmarkRun` with
- `scenario` (str: "baseline", "cold-warm", "concurrency", "slots", "context", "speculative",
  "allocation", "prefix-reuse"), `status` ("done" when finished), `model` (str, the public id),
  `finished_at` (datetime), `launch` (dict: the worker's launch configuration: gpus,
  split_mode, rope_scaling / yarn, …);
- results: `ttft_ms_p50`, `generation_rate` (tokens/s, llama-server timings),
  `prompt_eval_rate` (tokens/s);
- `get_absolute_url()` (the run's page);
and `research.roofline.decode_ceiling_tokens_per_s(run) -> float | None` (the bandwidth-bound
single-stream decode ceiling for that run's model and GPUs).
Missing names are read as None, never as an error.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

SCENARIOS_YARN = frozenset({"context", "yarn"})


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

    @property
    def percent_of_ceiling(self) -> float | None:
        if not self.generation_rate or not self.ceiling_tokens_per_s:
            return None
        return 100.0 * self.generation_rate / self.ceiling_tokens_per_s


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _uses_yarn(launch: Any) -> bool:
    if not isinstance(launch, dict):
        return False
    text = " ".join(f"{k}={v}" for k, v in launch.items()).lower()
    return "yarn" in text


def _load_runs(limit: int) -> list[BenchmarkFact] | None:
    """Finished runs, newest first; None when the research app has no BenchmarkRun model."""
    try:
        models = importlib.import_module("research.models")
    except ImportError:
        return None
    run_model = getattr(models, "BenchmarkRun", None)
    if run_model is None:
        return None
    ceiling: Callable[[Any], Any] | None = None
    try:
        ceiling = getattr(importlib.import_module("research.roofline"), "decode_ceiling_tokens_per_s", None)
    except ImportError:
        ceiling = None
    runs = run_model.objects.all()
    field_names = {f.name for f in run_model._meta.get_fields()}
    if "status" in field_names:
        runs = runs.filter(status="done")
    if "finished_at" in field_names:
        runs = runs.order_by("-finished_at")
    facts = []
    for run in runs[:limit]:
        try:
            top = _number(ceiling(run)) if ceiling is not None else None
        except Exception:  # noqa: BLE001 - a run the roofline cannot place shows no ceiling, not a 500
            top = None
        url = run.get_absolute_url() if hasattr(run, "get_absolute_url") else ""
        facts.append(BenchmarkFact(
            run_id=run.pk, scenario=str(getattr(run, "scenario", "") or ""), model=str(getattr(run, "model", "") or ""),
            finished_at=getattr(run, "finished_at", None), ttft_ms_p50=_number(getattr(run, "ttft_ms_p50", None)),
            generation_rate=_number(getattr(run, "generation_rate", None)),
            prompt_eval_rate=_number(getattr(run, "prompt_eval_rate", None)), ceiling_tokens_per_s=top, url=url,
            yarn=_uses_yarn(getattr(run, "launch", None)),
        ))
    return facts


def benchmark_runs(limit: int = 200) -> list[BenchmarkFact] | None:
    """Finished runs, newest first; None when the research app cannot be read (not built yet)."""
    return _load_runs(limit)


def latest_benchmark() -> BenchmarkFact | None:
    runs = benchmark_runs(limit=1)
    return runs[0] if runs else None


def runs_of(runs: Iterable[BenchmarkFact], scenarios: Iterable[str]) -> list[BenchmarkFact]:
    wanted = set(scenarios)
    return [run for run in runs if run.scenario in wanted]
