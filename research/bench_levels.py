"""What `manage.py bench` does for one target: calibrate the prompt, run each load level as a
stored run, put the roofline beside the measured generation rate, and build the JSON report."""
from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleet.models import Gpu, Worker
from research.loadgen import Target, fit_prompt_words
from research.metrics import Slo
from research.models import BenchmarkRun, Experiment
from research.progress import ProgressBar
from research.roofline import gpu_spec, read_gguf, roofline_for_gguf
from research.services import Workload, benchmark_run, new_group

Out = Callable[[str], Any]


@dataclass(frozen=True)
class BenchOptions:
    base_url: str
    model: str
    requests: int
    prompt_tokens: int
    output_tokens: int
    api_key: str | None = None
    concurrency: list[int] | None = None
    rates: list[float] | None = None
    warmup: int = 1
    slo: Slo | None = None
    label: str = ""
    experiment_id: int | None = None
    bandwidth_gbs: float | None = None
    threads: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)

    def with_changes(self, **changes: Any) -> "BenchOptions":
        return replace(self, **changes)

    def target(self) -> Target:
        return Target(base_url=self.base_url, model=self.model, api_key=self.api_key, extra_body=self.extra_body)


def worker_bandwidth_gbs(worker: Worker | None) -> tuple[float | None, int, str]:
    """(one GPU's bandwidth from the spec table, GPU count, split mode) for a worker on a rig;
    (None, 0, '') when its GPUs are unknown or not in the table."""
    if worker is None or worker.rig_id is None or not worker.gpu_indices:
        return None, 0, ""
    names = set(Gpu.objects.filter(rig_id=worker.rig_id, index__in=list(worker.gpu_indices))
                .values_list("name", flat=True))
    bandwidths = []
    for name in names:
        try:
            bandwidths.append(gpu_spec(name.replace("NVIDIA ", "").replace("GeForce ", "")).bandwidth_gbs)
        except KeyError:
            return None, 0, ""
    split = str((worker.launch or {}).get("split_mode") or "layer")
    return (min(bandwidths) if bandwidths else None), len(worker.gpu_indices), split


def attach_roofline(run: BenchmarkRun, *, bandwidth_gbs: float | None) -> None:
    """Adds summary['roofline'] (ceiling and % of it) when the model file and a bandwidth are known."""
    model_path = run.launch.get("model_path")
    bandwidth, gpus, split = worker_bandwidth_gbs(run.worker)
    if bandwidth_gbs is not None:
        bandwidth, gpus, split = bandwidth_gbs, 1, "none"
    if not model_path or not Path(str(model_path)).is_file() or bandwidth is None:
        return
    facts = read_gguf(str(model_path))
    context = int(run.summary.get("prompt_tokens_mean") or 0)
    line = roofline_for_gguf(facts, bandwidth_gbs=bandwidth, gpus=max(gpus, 1), split_mode=split or "layer",
                             context_tokens=context)
    rate = run.summary.get("generation_rate")
    run.summary["roofline"] = {**line.as_dict(), "percent_of_ceiling": line.percent(rate)}
    run.save(update_fields=["summary"])


def level_seed(group: str, label: str) -> int:
    """Prompts of their own for every level (deterministic from the group id and the level's
    label), so no level finds another level's prompts, or a prefix of them, in the server's
    prompt cache; shorter and longer prompts from one seed would share their first words."""
    return zlib.crc32(f"{group}/{label}".encode())


def bench_levels(options: BenchOptions, *, out: Out, scenario: str = "", group: str | None = None,
                 launch: dict[str, Any] | None = None, label_prefix: str = "",
                 cold_start: dict[str, Any] | None = None) -> dict[str, Any]:
    """Runs every level of `options` (each concurrency, or each rate) as one stored run of one
    group; returns the report: {group, base_url, model, ..., levels: [level JSON, ...]}.
    `cold_start` (time_to_healthy_s, load_duration_s of a worker the caller just started) goes
    into the first level's summary: that level holds the worker's first generations."""
    target = options.target()
    group = group or new_group()
    words, measured_prompt = fit_prompt_words(target, prompt_tokens=options.prompt_tokens)
    out(f"prompt: {words} words -> {measured_prompt} tokens as the server counts them "
        f"(wanted {options.prompt_tokens})")
    experiment = Experiment.objects.filter(pk=options.experiment_id).first() if options.experiment_id else None
    if options.experiment_id and experiment is None:
        raise ValueError(f"no experiment with id {options.experiment_id}")
    levels: list[tuple[int | None, float | None]] = (
        [(c, None) for c in options.concurrency] if options.concurrency else [(None, r) for r in options.rates or []]
    )
    report_levels = []
    for level_number, (concurrency, rate) in enumerate(levels):
        load = f"concurrency {concurrency}" if concurrency is not None else f"rate {rate:g}/s"
        label = " ".join(part for part in (label_prefix, options.label, load) if part)
        workload = Workload(prompt_tokens=options.prompt_tokens, output_tokens=options.output_tokens,
                            requests=options.requests, warmup=options.warmup, concurrency=concurrency, rate=rate,
                            words=words, seed=level_seed(group, label))
        run = benchmark_run(target=target, workload=workload, group=group, label=label, scenario=scenario,
                            slo=options.slo, launch=launch, experiment=experiment, progress=ProgressBar(label))
        if cold_start and level_number == 0:
            run.summary["cold_start"] = cold_start
            run.save(update_fields=["summary"])
        attach_roofline(run, bandwidth_gbs=options.bandwidth_gbs)
        report_levels.append(run.summary)
    return {
        "group": group,
        "scenario": scenario,
        "base_url": options.base_url,
        "model": options.model,
        "prompt_tokens": options.prompt_tokens,
        "prompt_tokens_measured": measured_prompt,
        "output_tokens": options.output_tokens,
        "definitions": "vLLM bench serve / NVIDIA AIPerf: TTFT to the first content chunk; "
                       "TPOT = (E2E - TTFT) / (output tokens - 1) per request (AIPerf's ITL); "
                       "inter_chunk_latency = gaps between content chunks, all requests pooled "
                       "(AIPerf's inter chunk latency, vLLM's ITL); times in ms",
        "levels": report_levels,
    }


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def format_level_line(level: dict[str, Any]) -> str:
    """One terminal line per level: the numbers a reader compares first."""
    roof = level.get("roofline") or {}
    pct = roof.get("percent_of_ceiling")
    rate = level.get("generation_rate")
    goodput = level.get("goodput")
    return (
        f"{level.get('label') or ''}: {level['completed']}/{level['requests']} ok | "
        f"TTFT p50 {_ms(level['ttft_ms']['p50'])} p90 {_ms(level['ttft_ms']['p90'])} ms | "
        f"TPOT p50 {_ms(level['tpot_ms']['p50'])} p90 {_ms(level['tpot_ms']['p90'])} ms | "
        f"inter-chunk p90 {_ms(level['inter_chunk_latency_ms']['p90'])} ms | E2E p90 {_ms(level['e2e_ms']['p90'])} ms | "
        f"{level['request_throughput']:.2f} req/s, {level['output_throughput']:.1f} out tok/s"
        + (f" | gen {rate:.1f} tok/s" if rate is not None else "")
        + (f" ({pct:.0f}% of {roof['ceiling_tok_s']:.0f} ceiling)" if pct is not None else "")
        + (f" | goodput {goodput:.2f} req/s" if goodput is not None else "")
    )
