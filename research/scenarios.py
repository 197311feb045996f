"""Named benchmark presets (`manage.py bench --scenario NAME`). Each launches the local
llama-server configurations it compares (fleet.local_worker's launcher, SmolLM2 by default),
runs `bench_levels` against each and stops them. On a rig the same comparisons are made by
pointing `bench` at the workers the agent launched (docs/research/rig-baseline.md).

Every scenario returns the bench JSON report (`levels`: one entry per stored run) plus a
`scenario_results` list of the scenario's own numbers (times to healthy, engine-only rates, ...).
"""
from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from fleet.local_worker import (
    DEFAULT_MODEL_ID,
    LaunchOptions,
    LlamaServerProcess,
    LlamaServerSpec,
    find_default_model,
    find_llama_bench,
    free_port,
    load_duration_s,
    run_llama_bench,
)
from research.bench_levels import BenchOptions, Out, bench_levels
from research.loadgen import Target, prompt_text, stream_one
from research.services import new_group

Report = dict[str, Any]
NATIVE_CONTEXT = 8192  # SmolLM2's trained context; YaRN stretches past it


def launch_config(spec: LlamaServerSpec) -> dict[str, Any]:
    """The launch configuration stored with a run: slots, context, threads, YaRN, speculative."""
    return {"slots": spec.slots, "context": spec.context, "model_path": str(spec.model_path),
            **spec.options.summary(), "argv": spec.command(Path("llama-server"))[1:]}


@contextmanager
def local_server(*, slots: int = 1, context: int = 4096, options: LaunchOptions | None = None,
                 log_dir: Path | None = None) -> Iterator[tuple[LlamaServerProcess, float]]:
    """A llama-server with SmolLM2 on a free port; yields (process, seconds to healthy)."""
    spec = LlamaServerSpec(model_path=find_default_model(), port=free_port(), context=context, slots=slots,
                           options=options or LaunchOptions())
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="ocs-bench-"))
    process = LlamaServerProcess(spec, log_path=log_dir / f"llama-{spec.port}.log", gpus=())
    process.start()
    try:
        healthy_s = process.wait_healthy(180)
        yield process, healthy_s
    finally:
        process.stop()


def _on(options: BenchOptions, process: LlamaServerProcess) -> BenchOptions:
    return options.with_changes(base_url=process.spec.base_url, api_key=None, model=DEFAULT_MODEL_ID)


def _threads(options: BenchOptions) -> int:
    return options.threads or 2


def _merge(reports: list[Report], scenario: str, results: list[dict[str, Any]]) -> Report:
    merged: Report = dict(reports[0]) if reports else {"scenario": scenario}
    merged["scenario"] = scenario
    merged["levels"] = [level for report in reports for level in report.get("levels", [])]
    merged["scenario_results"] = results
    return merged


# --- the scenarios ----------------------------------------------------------------------------


def concurrency_sweep(options: BenchOptions, out: Out) -> Report:
    """One server with as many slots as the highest level; levels 1, 2, 4 unless given."""
    levels = options.concurrency or [1, 2, 4]
    group = new_group()
    launch_opts = LaunchOptions(threads=_threads(options))
    with local_server(slots=max(levels), context=4096 * max(levels), options=launch_opts) as (process, _):
        report = bench_levels(_on(options, process).with_changes(concurrency=levels, rates=None), out=out,
                              scenario="concurrency-sweep", group=group, launch=launch_config(process.spec))
    engine = llama_bench(pp=options.prompt_tokens, tg=options.output_tokens, threads=_threads(options))
    return _merge([report], "concurrency-sweep", [{"engine_only": engine}])


def slots_sweep(options: BenchOptions, out: Out) -> Report:
    """-np 1, 2, 4: each server driven at concurrency = its slots (same per-slot context)."""
    group = new_group()
    reports = []
    for slots in options.concurrency or [1, 2, 4]:
        with local_server(slots=slots, context=2048 * slots, options=LaunchOptions(threads=_threads(options))) as (
            process, _,
        ):
            reports.append(bench_levels(_on(options, process).with_changes(concurrency=[slots], rates=None), out=out,
                                        scenario="slots-sweep", group=group, launch=launch_config(process.spec),
                                        label_prefix=f"np={slots}"))
    return _merge(reports, "slots-sweep", [])


def context_sweep(options: BenchOptions, out: Out) -> Report:
    """Prompt lengths inside the native 8,192 context, then past it with YaRN (ctx 16,384,
    --rope-scaling yarn --rope-scale 2 --yarn-orig-ctx 8192). One stream."""
    group = new_group()
    reports = []
    plain = LaunchOptions(threads=_threads(options))
    with local_server(slots=1, context=NATIVE_CONTEXT, options=plain) as (process, _):
        for prompt_tokens in (256, 2048, 7000):
            reports.append(bench_levels(_on(options, process).with_changes(prompt_tokens=prompt_tokens,
                                                                         concurrency=[1], rates=None),
                                        out=out, scenario="context-sweep", group=group,
                                        launch=launch_config(process.spec), label_prefix=f"ctx {prompt_tokens}"))
    yarn = LaunchOptions(threads=_threads(options), rope_scaling="yarn", rope_scale=2.0, yarn_orig_ctx=NATIVE_CONTEXT)
    with local_server(slots=1, context=2 * NATIVE_CONTEXT, options=yarn) as (process, _):
        for prompt_tokens in (2048, 12000):
            reports.append(bench_levels(_on(options, process).with_changes(prompt_tokens=prompt_tokens,
                                                                         concurrency=[1], rates=None),
                                        out=out, scenario="context-sweep", group=group,
                                        launch=launch_config(process.spec),
                                        label_prefix=f"yarn x2 ctx {prompt_tokens}"))
    return _merge(reports, "context-sweep", [])


SPECULATIVE_ON = ("--spec-type", "ngram-simple")  # the pinned build's --help: draft-free n-gram lookup


def speculative(options: BenchOptions, out: Out) -> Report:
    """Single stream, n-gram speculative decoding (no draft model) off, then on. Prompts that
    ask the model to repeat words give the n-gram lookup something to find."""
    group = new_group()
    reports = []
    for name, extra in (("spec off", ()), ("spec ngram", SPECULATIVE_ON)):
        opts = LaunchOptions(threads=_threads(options), extra_args=tuple(extra))
        with local_server(slots=1, context=4096, options=opts) as (process, _):
            reports.append(bench_levels(_on(options, process).with_changes(concurrency=[1], rates=None), out=out,
                                        scenario="speculative", group=group, launch=launch_config(process.spec),
                                        label_prefix=name))
    return _merge(reports, "speculative", [])


def allocation(options: BenchOptions, out: Out) -> Report:
    """The same model on different worker configurations. Here CPU threads 1 and 2 stand in for
    GPU allocations (on a rig: -sm layer/row/tensor and GPU subsets); the code path is the same."""
    group = new_group()
    reports = []
    for threads in (1, 2):
        with local_server(slots=1, context=4096, options=LaunchOptions(threads=threads)) as (process, _):
            reports.append(bench_levels(_on(options, process).with_changes(concurrency=options.concurrency or [1],
                                                                         rates=None),
                                        out=out, scenario="allocation", group=group,
                                        launch=launch_config(process.spec), label_prefix=f"threads={threads}"))
    engine = [{"threads": t, **llama_bench(pp=options.prompt_tokens, tg=options.output_tokens, threads=t)}
              for t in (1, 2)]
    return _merge(reports, "allocation", [{"engine_only": engine}])


def cold_vs_warm(options: BenchOptions, out: Out) -> Report:
    """Start the worker twice; each time a cold run (one request, no warm-up: the first
    generation the fresh process performs; its summary holds time to /health 200 and the load
    duration) and then a warm run of `--requests` requests."""
    group = new_group()
    reports = []
    results = []
    for attempt in range(2):
        with local_server(slots=1, context=4096, options=LaunchOptions(threads=_threads(options))) as (
            process, healthy_s,
        ):
            on_it = _on(options, process).with_changes(concurrency=[1], rates=None)
            cold_start = {"time_to_healthy_s": healthy_s, "load_duration_s": load_duration_s(process.log_path)}
            cold = bench_levels(on_it.with_changes(requests=1, warmup=0), out=out, scenario="cold-vs-warm",
                                group=group, launch=launch_config(process.spec),
                                label_prefix=f"start {attempt + 1} cold", cold_start=cold_start)
            warm = bench_levels(on_it.with_changes(warmup=0), out=out, scenario="cold-vs-warm", group=group,
                                launch=launch_config(process.spec), label_prefix=f"start {attempt + 1} warm")
            first = cold["levels"][0]["ttft_ms"]["p50"]
            warm_p50 = warm["levels"][0]["ttft_ms"]["p50"]
            results.append({"start": attempt + 1, **cold_start, "first_ttft_ms": first,
                            "warm_ttft_p50_ms": warm_p50})
            out(f"start {attempt + 1}: healthy after {healthy_s:.2f} s, first TTFT {first:.0f} ms, "
                f"warm TTFT p50 {warm_p50:.0f} ms")
            reports += [cold, warm]
    return _merge(reports, "cold-vs-warm", results)


def prefix_reuse(options: BenchOptions, out: Out) -> Report:
    """A conversation's second turn sent to the worker that served the first (its KV cache holds
    the conversation) versus to another worker that has never seen it. TTFT of each."""
    results = []
    with local_server(slots=1, context=8192, options=LaunchOptions(threads=_threads(options))) as (a, _), \
         local_server(slots=1, context=8192, options=LaunchOptions(threads=_threads(options))) as (b, _):
        same = Target(base_url=a.spec.base_url, model=DEFAULT_MODEL_ID)
        other = Target(base_url=b.spec.base_url, model=DEFAULT_MODEL_ID)
        words = max(options.prompt_tokens - 20, 1)
        for turn in range(max(options.requests, 1)):
            first_text = prompt_text(words=words, seed=5000 + turn)
            first = asyncio.run(_sample(same, [{"role": "user", "content": first_text}], options.output_tokens))
            history = [{"role": "user", "content": first_text},
                       {"role": "assistant", "content": first.content},
                       {"role": "user", "content": "Thank you. " + prompt_text(words=20, seed=9000 + turn)}]
            on_same = asyncio.run(_sample(same, history, options.output_tokens))
            on_other = asyncio.run(_sample(other, history, options.output_tokens))
            row = {
                "turn": turn, "prompt_tokens": on_same.timing.prompt_tokens,
                "first_turn_ttft_ms": _ttft(first), "second_turn_same_worker_ttft_ms": _ttft(on_same),
                "second_turn_other_worker_ttft_ms": _ttft(on_other),
                "same_worker_cached_tokens": on_same.cached_tokens, "other_worker_cached_tokens": on_other.cached_tokens,
            }
            results.append(row)
            out(f"turn {turn}: second turn TTFT same worker {row['second_turn_same_worker_ttft_ms']:.0f} ms "
                f"({on_same.cached_tokens} cached) vs other worker {row['second_turn_other_worker_ttft_ms']:.0f} ms")
    return {"scenario": "prefix-reuse", "levels": [], "scenario_results": results}


async def _sample(target: Target, messages: list[dict[str, str]], output_tokens: int) -> Any:
    async with httpx.AsyncClient(timeout=target.timeout_s) as client:
        sample = await stream_one(client, target, messages=messages, output_tokens=output_tokens, index=0, warmup=False)
    if sample.error:
        raise RuntimeError(sample.error)
    return sample


def _ttft(sample: Any) -> float:
    return float(sample.timing.ttft_s or 0) * 1000


def engine_only(options: BenchOptions, out: Out) -> Report:
    """llama-bench alone (no HTTP): prompt processing and generation rates."""
    result = llama_bench(pp=options.prompt_tokens, tg=options.output_tokens, threads=_threads(options))
    out(f"llama-bench pp{options.prompt_tokens} {result['pp_tok_s']:.1f} tok/s, "
        f"tg{options.output_tokens} {result['tg_tok_s']:.1f} tok/s")
    return {"scenario": "engine-only", "levels": [], "scenario_results": [result]}


# --- llama-bench ------------------------------------------------------------------------------


def llama_bench(*, pp: int, tg: int, threads: int, repetitions: int = 3, model: Path | None = None,
                extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Runs llama-bench -p pp -n tg -r repetitions -o json; returns the mean rates (tokens/s)."""
    command = [str(find_llama_bench()), "-m", str(model or find_default_model()), "-p", str(pp), "-n", str(tg),
               "-t", str(threads), "-r", str(repetitions), "-o", "json", *extra]
    started = time.monotonic()
    rows = run_llama_bench(command, gpus=(), timeout_s=900)  # CPU: every GPU hidden
    pp_row: dict[str, Any] = next((r for r in rows if r.get("n_prompt") and not r.get("n_gen")), {})
    tg_row: dict[str, Any] = next((r for r in rows if r.get("n_gen") and not r.get("n_prompt")), {})
    return {
        "tool": "llama-bench", "build": rows[0].get("build_commit") if rows else None, "threads": threads,
        "repetitions": repetitions, f"pp{pp}": pp_row.get("avg_ts"), f"tg{tg}": tg_row.get("avg_ts"),
        "pp_tok_s": pp_row.get("avg_ts"), "pp_stddev": pp_row.get("stddev_ts"),
        "tg_tok_s": tg_row.get("avg_ts"), "tg_stddev": tg_row.get("stddev_ts"),
        "wall_s": time.monotonic() - started, "command": " ".join(command[1:]),
    }


SCENARIOS: dict[str, Callable[[BenchOptions, Out], Report]] = {
    "cold-vs-warm": cold_vs_warm,
    "concurrency-sweep": concurrency_sweep,
    "slots-sweep": slots_sweep,
    "context-sweep": context_sweep,
    "speculative": speculative,
    "allocation": allocation,
    "prefix-reuse": prefix_reuse,
    "engine-only": engine_only,
}


def run_scenario(name: str, options: BenchOptions, *, out: Out) -> Report:
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}")
    return SCENARIOS[name](options, out)


