"""A stored baseline (research.models.Baseline) as a Markdown report with SVG plots beside it:
docs/research/baseline-<worker>-<date>.md, what `rig_baseline` writes when it ends (also when it
was stopped: the report says how far it got)."""
from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

from research import report as tables
from research.models import Baseline, BenchmarkRun


def _levels(runs: list[BenchmarkRun]) -> list[dict[str, Any]]:
    return [{**run.summary, "label": run.label} for run in runs if run.summary.get("ttft_ms")]


def _engine_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| test | split | flash attn | GPU layers | threads | tokens/s | ± |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        test = f"pp{row.get('n_prompt')}" if row.get("n_prompt") else f"tg{row.get('n_gen')}"
        lines.append(f"| {test} | {row.get('split_mode', '')} | {row.get('flash_attn', '')} "
                     f"| {row.get('n_gpu_layers', '')} | {row.get('n_threads', '')} "
                     f"| {tables._num(row.get('avg_ts'))} | {tables._num(row.get('stddev_ts'))} |")
    return "\n".join(lines)


def _roofline_line(levels: list[dict[str, Any]]) -> str:
    marks = [(level["label"], (level.get("roofline") or {}).get("percent_of_ceiling")) for level in levels]
    marks = [(label, pct) for label, pct in marks if pct is not None]
    if not marks:
        return "No roofline: the worker's model facts or its GPUs' bandwidth are unknown."
    ceiling = (levels[0].get("roofline") or {}).get("ceiling_tok_s")
    return (f"Roofline ceiling {tables._num(ceiling)} tokens/s; measured generation as a share of it: "
            + ", ".join(f"{label} {pct:.0f} %" for label, pct in marks) + ".")


def _gpu_table(summaries: list[dict[str, Any]]) -> str:
    lines = ["| GPU | samples | util mean / max (%) | memory max (MiB) | SM clock mean / max (MHz) "
             "| PCIe gen min–max (max) | width min–max (max) |", "|---|---|---|---|---|---|---|"]
    for gpu in summaries:
        lines.append(
            f"| {gpu['rig']}:{gpu['gpu_index']} {gpu['name']} | {gpu['samples']} "
            f"| {tables._num(gpu['utilization_pct_mean'])} / {tables._num(gpu['utilization_pct_max'], 0)} "
            f"| {tables._num(gpu['memory_used_mib_max'], 0)} "
            f"| {tables._num(gpu['sm_clock_mhz_mean'], 0)} / {tables._num(gpu['sm_clock_mhz_max'], 0)} "
            f"| {gpu['pcie_gen_min']}–{gpu['pcie_gen_max']} ({gpu['pcie_max_gen']}) "
            f"| {gpu['pcie_width_min']}–{gpu['pcie_width_max']} ({gpu['pcie_max_width']}) |")
    return "\n".join(lines)


def write_report(baseline: Baseline, directory: Path, *, day: date) -> Path:
    """Writes the report and its plots; returns the report's path."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"baseline-{baseline.worker_name}-{day.isoformat()}"
    runs = list(BenchmarkRun.objects.filter(baseline=baseline).order_by("started_at", "id"))
    by_kind: dict[str, list[BenchmarkRun]] = {}
    for run in runs:
        by_kind.setdefault(run.baseline_kind, []).append(run)
    lines = [f"# Baseline of {baseline.worker_name}, {day.isoformat()}", "",
             f"`python manage.py rig_baseline --worker {baseline.worker_name}` (baseline {baseline.pk}, "
             f"{baseline.get_status_display().lower()}{': ' + baseline.error if baseline.error else ''}).", ""]
    if baseline.rehearsal:
        lines += ["**REHEARSAL**: measured on a rehearsal rig (CPU workers, NVML faked). These numbers are not a "
                  "GPU's and never count as rig evidence.", ""]
    launch = runs[0].launch if runs else (baseline.worker.launch if baseline.worker else {})
    lines += [f"Launch: GPUs {launch.get('gpu_indices', [])}, split `{launch.get('split_mode', 'layer')}`, "
              f"slots {launch.get('slots', '?')}, context {launch.get('context', '?')}.", "",
              "| step | status | runs | note |", "|---|---|---|---|"]
    for step in baseline.steps:
        lines.append(f"| {step['kind']} | {step['status']} | {', '.join(str(i) for i in step['run_ids']) or '–'} "
                     f"| {step.get('note', '')} |")
    lines.append("")
    for step in baseline.steps:
        kind = step["kind"]
        levels = _levels(by_kind.get(kind, []))
        if kind == "engine" and step["result"].get("rows"):
            lines += ["## Engine only (llama-bench, through the rig agent)", "",
                      f"`llama-bench {' '.join(step['result'].get('argv', []))}` on GPUs {step['result'].get('gpus')}.",
                      "", _engine_table(step["result"]["rows"]), ""]
        elif kind == "cold" and levels:
            cold = step["result"]
            verdict = ("the first generation the restarted worker performed" if cold.get("first_generation")
                       else f"NOT the first generation: {cold.get('decodes_before')} decode call(s) came before it")
            lines += ["## Cold start", "",
                      f"Restarted by the agent with `--no-warmup`: healthy after {tables._num(cold.get('time_to_healthy_s'), 2)} s, "
                      f"model loaded in {tables._num(cold.get('load_duration_s'), 2)} s. The measured request was {verdict}.", "",
                      tables.levels_table(levels), ""]
        elif levels:
            title = dict(BenchmarkRun.BaselineKind.choices).get(kind, kind)
            lines += [f"## {title}", "", tables.levels_table(levels), "", _roofline_line(levels), ""]
            if step["result"].get("plan_line"):
                lines += [f"The context plan for this worker (`context_plan --worker {baseline.worker_name}`): "
                          f"{step['result']['plan_line']}.", ""]
            plot = None
            if kind == "concurrency":
                plot = tables.throughput_vs_load(levels, title=f"{baseline.worker_name}: throughput vs concurrency")
            elif kind in ("prompt-size", "context"):
                plot = tables.ttft_vs_prompt(levels, title=f"{baseline.worker_name}: TTFT vs prompt ({kind})")
            if plot:
                name = f"{stem}-{kind}.svg"
                (directory / name).write_text(plot)
                lines += [f"![{title}]({name})", ""]
    # The per-card table of the run with the most readings (one a second while a run goes on: a
    # run shorter than a second may have none).
    sampled = max(runs, key=lambda run: sum(gpu.get("samples", 0) for gpu in run.summary.get("gpus") or []),
                  default=None)
    if sampled is not None and sampled.summary.get("gpus"):
        lines += [f"## GPUs during run {sampled.pk} ({sampled.baseline_kind}: {sampled.label})", "",
                  _gpu_table(sampled.summary["gpus"]), "",
                  "Every run's own per-card summary is on its page and in its JSON (`summary.gpus`).", ""]
    path = directory / f"{stem}.md"
    path.write_text("\n".join(lines))
    return path
