"""What `manage.py bench` does for one target: calibrate the prompt, run each load level as a
stored run, put the roofline beside the measured generation rate, and build the JSON report."""
from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleet.models import Gpu, Worker
from research.loadgen import Target, fit_prompt_words
from research.metrics import Slo
from research.models import BenchmarkRun, Experiment
from research.progress_bar import ProgressBar
from research.roofline import GgufFacts, gpu_spec, read_gguf, roofline_for_gguf
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
    prefix_tokens: int = 0  # every request's prompt starts with the same ~N tokens (prefix reuse)

    def with_changes(self, **changes: Any) -> "BenchOptions":
        return replace(self, **changes)

    def target(self) -> Target:
        return Target(base_url=self.base_url, model=self.model, api_key=self.api_key, extra_body=self.extra_body)


def worker_bandwidths_gbs(worker: Worker | None) -> list[float]:
    """One bandwidth per GPU of a worker on a rig, in its CUDA order (`gpu_indices`, which
    `--tensor-split` follows), from the spec table by the names the agent reports; [] when its
    GPUs are unknown or one is not in the table."""
    if worker is None or worker.rig_id is None or not worker.gpu_indices:
        return []
    names = dict(Gpu.objects.filter(rig_id=worker.rig_id, index__in=list(worker.gpu_indices))
                 .values_list("index", "name"))
    bandwidths = []
    for index in worker.gpu_indices:
        try:
            bandwidths.append(gpu_spec(str(names.get(index, "")).replace("NVIDIA ", "").replace("GeForce ", ""))
                              .bandwidth_gbs)
        except KeyError:
            return []
    return bandwidths


def model_facts(launch: dict[str, Any]) -> tuple[GgufFacts | None, str]:
    """The model's GGUF facts and where they came from: as the rig agent reported them
    ('agent'; the control plane has no model file), else read from the model file when it is on
    this machine ('file'); (None, '') when neither."""
    reported = launch.get("gguf")
    if isinstance(reported, dict):
        try:
            return GgufFacts.from_dict(reported), "agent"
        except ValueError:
            pass
    model_path = launch.get("model_path")
    if model_path and Path(str(model_path)).is_file():
        return read_gguf(str(model_path)), "file"
    return None, ""


def attach_roofline(run: BenchmarkRun, *, bandwidth_gbs: float | None) -> None:
    """Adds summary['roofline'] (ceiling and % of it) when the model's facts and a bandwidth are
    known. Split mode and `--tensor-split` shares come from the worker's launch; `bandwidth_gbs`
    replaces each GPU's bandwidth (the worker's GPU count and split stay)."""
    facts, source = model_facts(run.launch)
    if facts is None:
        return
    split = str(run.launch.get("split_mode") or "layer")
    gpu_count = len(run.worker.gpu_indices) if run.worker is not None and run.worker.gpu_indices else 0
    bandwidths = [bandwidth_gbs] * max(gpu_count, 1) if bandwidth_gbs is not None else worker_bandwidths_gbs(run.worker)
    if not bandwidths:
        return
    main_gpu = run.launch.get("main_gpu")
    if split == "none" and isinstance(main_gpu, int) and 0 <= main_gpu < len(bandwidths):
        bandwidths = [bandwidths[main_gpu]]
    shares = [float(share) for share in run.launch.get("tensor_split") or []]
    if len(shares) != len(bandwidths):
        shares = []  # a split that does not match the GPUs: llama.cpp's own default, about equal
    context = int(run.summary.get("prompt_tokens_mean") or 0)
    try:
        line = roofline_for_gguf(facts, bandwidths_gbs=bandwidths, split_mode=split, shares=shares,
                                 context_tokens=context)
    except ValueError:
        return
    rate = run.summary.get("generation_rate")
    run.summary["roofline"] = {**line.as_dict(), "percent_of_ceiling": line.percent(rate),
                               "model_facts_from": source}
    run.save(update_fields=["summary"])


def level_seed(group: str, label: str) -> int:
    """Prompts of their own for every level (deterministic from the group id and the level's
    label), so no level finds another level's prompts, or a prefix of them, in the server's
    prompt cache; shorter and longer prompts from one seed would share their first words."""
    return zlib.crc32(f"{group}/{label}".encode())


def bench_levels(options: BenchOptions, *, out: Out, scenario: str = "", group: str | None = None,
                 launch: dict[str, Any] | None = None, label_prefix: str = "",
                 cold_start: dict[str, Any] | None = None, fitted: tuple[int, int] | None = None) -> dict[str, Any]:
    """Runs every level of `options` (each concurrency, or each rate) as one stored run of one
    group; returns the report: {group, base_url, model, ..., levels: [level JSON, ...]}.
    `cold_start` (time_to_healthy_s, load_duration_s of a worker the caller just started) goes
    into the first level's summary: that level holds the worker's first generations. `fitted`:
    (words, prompt tokens) already fitted, so nothing is sent before the first request."""
    target = options.target()
    group = group or new_group()
    words, measured_prompt = fitted or fit_prompt_words(target, prompt_tokens=options.prompt_tokens)
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
                            words=words, seed=level_seed(group, label),
                            prefix_words=(round(words * options.prefix_tokens / max(measured_prompt, 1))
                                          if options.prefix_tokens else 0))
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


def idle_levels(options: BenchOptions, *, gaps_s: list[float], out: Out,
                sleep: Callable[[float], Any] = time.sleep) -> dict[str, Any]:
    """Cold start after idle time: one request to warm the server ('before idle'), then for each
    gap, `gaps_s[i]` seconds of nothing followed by one measured request ('idle N s'), each a
    stored run of one group (scenario 'idle', `summary.idle_s`). Compare their TTFT with the
    first run's: a server (or the GPUs' clocks, or the OS's page cache) that slows after idling
    shows here. No warm-up requests: they would end the idle time."""
    group = new_group()
    single = options.with_changes(requests=1, warmup=0, concurrency=[1], rates=None)
    fitted = fit_prompt_words(single.target(), prompt_tokens=options.prompt_tokens)  # once: none after a gap
    reports = [bench_levels(single, out=out, scenario="idle", group=group, label_prefix="before idle", fitted=fitted)]
    for gap in gaps_s:
        out(f"idle for {gap:g} s ...")
        sleep(gap)
        report = bench_levels(single, out=out, scenario="idle", group=group, label_prefix=f"idle {gap:g} s",
                              fitted=fitted)
        run = BenchmarkRun.objects.get(pk=report["levels"][0]["run_id"])
        run.summary["idle_s"] = gap
        run.save(update_fields=["summary"])
        report["levels"][0]["idle_s"] = gap
        reports.append(report)
    merged = dict(reports[0])
    merged["scenario"] = "idle"
    merged["levels"] = [level for report in reports for level in report["levels"]]
    return merged


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
