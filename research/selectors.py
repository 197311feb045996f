"""Reads for the research pages: runs, groups, comparisons, exports and the charts' data."""
from __future__ import annotations

import csv
import io
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from fleet.gguf import GgufFacts
from fleet.models import Gpu, Worker
from research import svg
from research.bench_levels import model_facts
from research.planner.validation.records import noise_text
from research.models import (
    BenchmarkRun,
    Experiment,
    GpuSample,
    PlannerCheck,
    PoolSlo,
    PromotionCheck,
    RequestSample,
    RigPlan,
)

# (label, summary key, stat, unit, True when higher is better)
COMPARED: list[tuple[str, str, str, str, bool]] = [
    ("TTFT p50", "ttft_ms", "p50", "ms", False),
    ("TTFT p90", "ttft_ms", "p90", "ms", False),
    ("TPOT p50", "tpot_ms", "p50", "ms", False),
    ("TPOT p90", "tpot_ms", "p90", "ms", False),
    ("Inter-chunk latency p90", "inter_chunk_latency_ms", "p90", "ms", False),
    ("E2E p90", "e2e_ms", "p90", "ms", False),
    ("Requests per second", "request_throughput", "", "req/s", True),
    ("Output tokens per second", "output_throughput", "", "tok/s", True),
    ("Generation rate (server)", "generation_rate", "", "tok/s", True),
    ("Prompt eval rate (server)", "prompt_eval_rate", "", "tok/s", True),
    ("Goodput", "goodput", "", "req/s", True),
]


def rig_plan_latest() -> RigPlan | None:
    """The newest stored rigs search (plan_rigs)."""
    return RigPlan.objects.order_by("-created_at", "-id").first()


def runs_recent(limit: int = 200) -> QuerySet[BenchmarkRun]:
    return BenchmarkRun.objects.select_related("worker", "experiment")[:limit]


def group_runs(group: str) -> list[BenchmarkRun]:
    runs = BenchmarkRun.objects.filter(group=group).select_related("worker", "experiment")
    return sorted(runs, key=lambda r: (r.started_at, r.pk))


def experiments_all() -> QuerySet[Experiment]:
    return Experiment.objects.all()


def gate_overview() -> tuple[QuerySet[PoolSlo], QuerySet[PromotionCheck]]:
    return (PoolSlo.objects.select_related("pool"),
            PromotionCheck.objects.select_related("worker", "pool", "run")[:50])


# --- charts ------------------------------------------------------------------------------------


def latency_charts(run: BenchmarkRun) -> list[str]:
    """Histograms of TTFT, TPOT and E2E of the run's measured requests, p50 and p90 marked."""
    samples = list(RequestSample.objects.filter(run=run, warmup=False, ok=True))
    charts = []
    for title, values, key in (
        ("Time to first token", [s.ttft_ms for s in samples if s.ttft_ms is not None], "ttft_ms"),
        ("Time per output token", [s.tpot_ms for s in samples if s.tpot_ms is not None], "tpot_ms"),
        ("End-to-end latency", [s.e2e_ms for s in samples], "e2e_ms"),
    ):
        marks = [(stat, value) for stat in ("p50", "p90") if (value := run.metric(key, stat)) is not None]
        charts.append(svg.histogram(values, title=f"{title} (ms)", x_label="milliseconds",
                                    bins=min(20, max(len(values), 1)), marks=marks))
    return charts


def load_of(run: BenchmarkRun) -> float | None:
    return float(run.concurrency) if run.concurrency is not None else run.request_rate


def throughput_chart(runs: list[BenchmarkRun]) -> str:
    """Output tokens/s and per-request generation rate against the load (concurrency or rate)."""
    done = [r for r in runs if r.status == BenchmarkRun.Status.DONE and load_of(r) is not None]
    by_label: dict[str, list[BenchmarkRun]] = defaultdict(list)
    for run in done:
        by_label[_series_name(run)].append(run)
    series = []
    for name, members in by_label.items():
        points = sorted((load_of(r) or 0.0, r.metric("output_throughput", "") or 0.0) for r in members)
        series.append(svg.Series(f"{name} output".strip(), points))
        per_request = sorted((load_of(r) or 0.0, r.metric("generation_rate", "") or 0.0) for r in members
                             if r.metric("generation_rate", "") is not None)
        if per_request:
            series.append(svg.Series(f"{name} per request".strip(), per_request))
    rate_mode = any(r.request_rate is not None for r in done)
    return svg.line_chart(series, title="Tokens per second vs load",
                          x_label="request rate (req/s)" if rate_mode else "concurrency (requests in flight)",
                          y_label="tokens/s")


def _series_name(run: BenchmarkRun) -> str:
    """The label without its load part, so the levels of one configuration form one line."""
    label = run.label
    for marker in (" concurrency ", " rate "):
        if marker in f" {label}":
            label = f" {label}".split(marker)[0].strip()
    return label if label not in ("concurrency", "rate") else ""


def gpu_charts(run: BenchmarkRun) -> list[str]:
    """Utilization and memory over the run, one line per GPU."""
    samples = list(GpuSample.objects.filter(run=run).order_by("at"))
    if not samples:
        return []
    origin = samples[0].at
    util: dict[str, list[tuple[float, float]]] = defaultdict(list)
    memory: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for sample in samples:
        name = f"{sample.rig}/gpu{sample.gpu_index}"
        seconds = (sample.at - origin).total_seconds()
        if sample.utilization_pct is not None:
            util[name].append((seconds, float(sample.utilization_pct)))
        memory[name].append((seconds, float(sample.memory_used_mib)))
    return [
        svg.line_chart([svg.Series(k, v) for k, v in sorted(util.items())], title="GPU utilization (%)",
                       x_label="seconds into the run", y_label="%", markers=False),
        svg.line_chart([svg.Series(k, v) for k, v in sorted(memory.items())], title="GPU memory used (MiB)",
                       x_label="seconds into the run", y_label="MiB", markers=False),
    ]


# --- comparison -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComparedRow:
    label: str
    unit: str
    a: float | None
    b: float | None
    higher_is_better: bool

    @property
    def ratio(self) -> float | None:
        """b / a; None when either is missing or a is zero."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return "not measured in both"
        if abs(ratio - 1) < 0.05:
            return "about the same"
        better = ratio > 1 if self.higher_is_better else ratio < 1
        return "B better" if better else "A better"


def compare_runs(a: BenchmarkRun, b: BenchmarkRun) -> list[ComparedRow]:
    return [ComparedRow(label, unit, a.metric(key, stat), b.metric(key, stat), higher)
            for label, key, stat, unit, higher in COMPARED]


def compare_groups(a: list[BenchmarkRun], b: list[BenchmarkRun]) -> list[tuple[str, list[ComparedRow]]]:
    """Level by level (the same concurrency or rate in both groups), then the best output
    throughput of each group."""
    sections = []
    b_by_load = {(r.concurrency, r.request_rate): r for r in b}
    for run in a:
        other = b_by_load.get((run.concurrency, run.request_rate))
        if other is not None:
            sections.append((run.load_label, compare_runs(run, other)))

    def best(runs: list[BenchmarkRun]) -> float | None:
        values = [v for r in runs if (v := r.metric("output_throughput", "")) is not None]
        return max(values) if values else None

    sections.append(("best level of each group",
                     [ComparedRow("Peak output tokens per second", "tok/s", best(a), best(b), True)]))
    return sections


# --- exports ----------------------------------------------------------------------------------

SAMPLE_FIELDS = ["index", "warmup", "ok", "sent_ms", "ttft_ms", "tpot_ms", "e2e_ms", "prompt_tokens",
                 "output_tokens", "cached_tokens", "prompt_per_second", "predicted_per_second", "draft_n",
                 "draft_n_accepted", "error"]
RUN_FIELDS = ["id", "group", "scenario", "label", "target", "model", "concurrency", "request_rate", "requests",
              "prompt_tokens", "output_tokens", "status", "started_at"]


def samples_csv(run: BenchmarkRun) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(SAMPLE_FIELDS)
    for sample in RequestSample.objects.filter(run=run):
        writer.writerow([getattr(sample, name) for name in SAMPLE_FIELDS])
    return out.getvalue()


def runs_csv(runs: list[BenchmarkRun]) -> str:
    """One row per run: its workload and every compared number."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(RUN_FIELDS + [f"{key}_{stat}" if stat else key for _, key, stat, _, _ in COMPARED])
    for run in runs:
        writer.writerow([getattr(run, name) for name in RUN_FIELDS]
                        + [run.metric(key, stat) for _, key, stat, _, _ in COMPARED])
    return out.getvalue()


def run_json(run: BenchmarkRun, *, with_samples: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {name: getattr(run, name) for name in RUN_FIELDS}
    data.update(started_at=run.started_at.isoformat(), ended_at=run.ended_at.isoformat() if run.ended_at else None,
                base_url=run.base_url, launch=run.launch, llama_build=run.llama_build, warmup=run.warmup,
                summary=run.summary, experiment=run.experiment_id)
    if with_samples:
        data["samples"] = [{name: getattr(s, name) for name in SAMPLE_FIELDS}
                           | {"inter_chunk_gaps_ms": s.inter_chunk_gaps_ms}
                           for s in RequestSample.objects.filter(run=run)]
    return data


# --- class replays -----------------------------------------------------------------------------


def replay_charts(run: BenchmarkRun) -> list[str]:
    """A class replay's page: TTFT per persona over the run, each student's share of the weighted
    service, and Jain's index per 10 s window."""
    turns = [t for t in run.summary.get("requests") or [] if t.get("completed") and t.get("ttft_ms") is not None]
    by_persona: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for turn in turns:
        by_persona[turn["persona"]].append((float(turn["sent_s"]), float(turn["ttft_ms"]) / 1000))
    ttft = svg.line_chart([svg.Series(persona, sorted(points)) for persona, points in sorted(by_persona.items())],
                          title="Time to first token per persona, by when the turn was sent",
                          x_label="seconds into the run", y_label="TTFT (s)")
    students = sorted(run.summary.get("per_student") or [], key=lambda r: (r.get("persona", ""), r.get("student", "")))
    share = svg.bar_chart([(row["student"].removeprefix("replay-"), 100 * float(row.get("service_share") or 0))
                           for row in students],
                          title="Share of the weighted service received, per student", y_label="% of service",
                          groups=[row["persona"] for row in students])
    windows = run.summary.get("jain_windows") or []
    jain = svg.line_chart([svg.Series(name, [(float(w["start_s"]), float(w[key])) for w in windows
                                             if w.get(key) is not None])
                           for name, key in (("by service", "jain"), ("per s waiting", "jain_rate"))],
                          title="Jain's index per 10 s window (students waiting)", x_label="seconds into the run",
                          y_label="index (1 = even)")
    return [ttft, share, jain]


def worker_plan_inputs(worker: Worker) -> tuple[GgufFacts | None, int | None, float | None]:
    """What a context plan of a registered worker starts from: the GGUF facts its rig agent
    reported (or its model file, when here), how many GPUs it spans, and its smallest card's memory
    in GiB as the agent reports it; None for what is not known."""
    facts, _source = model_facts(worker.launch or {})
    gpus = len(worker.gpu_indices) if worker.gpu_indices else None
    vram = None
    if worker.rig_id and worker.gpu_indices:
        totals = list(Gpu.objects.filter(rig_id=worker.rig_id, index__in=list(worker.gpu_indices))
                      .values_list("memory_total_mib", flat=True))
        vram = min(totals) / 1024 if totals and min(totals) > 0 else None
    return facts, gpus, vram


def planner_checks_all() -> QuerySet[PlannerCheck]:
    """Every planner check, newest first (the list at /research/checks/)."""
    return PlannerCheck.objects.all()


def planner_check_sections(check: PlannerCheck) -> list[dict[str, Any]]:
    """A check's figures grouped by configuration, in the order it judged them, each configuration
    with its class, notes and turns (from `configurations`) and its noise."""
    classes = {c.get("label"): c for c in check.configurations}
    sections: dict[str, dict[str, Any]] = {}
    for figure in check.figures.all():
        section = sections.setdefault(figure.configuration, {
            "label": figure.configuration, "config": classes.get(figure.configuration) or {},
            "noise_text": noise_text({figure.configuration: check.noise.get(figure.configuration) or {}}),
            "figures": [], "runs": 0})
        section["figures"].append({
            "name": figure.figure, "predicted_s": _seconds(figure.predicted_ms),
            "runs_s": [_seconds(v) for v in figure.measured_ms], "mean_s": _seconds(figure.mean_ms),
            "ratio": figure.ratio, "spread_pct": None if figure.spread is None else 100 * figure.spread,
            "verdict": figure.verdict, "verdict_text": figure.get_verdict_display(), "holds": figure.holds})
        section["runs"] = max(section["runs"], len(figure.measured_ms))
    for section in sections.values():
        width = section["runs"]
        for row in section["figures"]:
            row["runs_s"] += [None] * (width - len(row["runs_s"]))
    return list(sections.values())


def _seconds(value_ms: float | None) -> float | None:
    return None if value_ms is None else value_ms / 1000
