"""The Ground 0 burndown: the phase's deliverables, each with a status read from evidence in
the system, or a manual check a teacher ticked. Reads only (ticking is lessons.services).

Statuses: `done`, `rehearsed` (the work was done on a rehearsal rig, whose GPUs are not real
NVML GPUs: never done), `partial` (some evidence, not all), `open` (no evidence yet). Rows about
measurements count a run by what it measured (lessons/run_evidence.py), never by its scenario's
name. Every row says, when it is not done, the command that would move it. A manual
deliverable is `done` while a ManualCheck row exists (who ticked it, when) and `open` otherwise.
Statuses are computed on every view ("live now"); the first time a row is seen done it is also
recorded as achieved (DeliverableAchieved), which stays when the evidence later lapses, and each
day's states are kept as snapshots for the history chart.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from core.dates import moment_text
from fleet.models import Gpu, Rig, Worker, WorkerEvent
from inference.models import RequestLog
from lessons import evidence, research_bridge
from lessons.models import DeliverableAchieved, ManualCheck, PathVerification
from lessons.run_evidence import NVML_UUID, is_public_https
from lessons.selectors import student_cohort

SUMMARY_PATH = Path(settings.BASE_DIR) / "docs" / "ground0.md"
START_PATH = Path(settings.BASE_DIR) / "docs" / "start-here.md"
WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Status:
    state: str  # done | rehearsed | partial | open
    evidence: str
    link: str = ""
    ticked_by: str = ""
    ticked_at: str = ""


@dataclass(frozen=True)
class Deliverable:
    slug: str
    title: str
    rule: str  # how the status is decided, in words, shown on the page
    manual: bool
    status: Status  # live now: what the evidence says today
    achieved: DeliverableAchieved | None = None  # first seen done, kept (lessons.services.burndown_observe)


def _request_link(row_id: int) -> str:
    return f"/admin/inference/requestlog/{row_id}/change/"


def copilot_path() -> Status:
    rows = evidence.served(RequestLog.objects.filter(at__gte=timezone.now() - WEEK))
    rig_worker_ids = set(Worker.objects.filter(rig__isnull=False).values_list("id", flat=True))
    copilot_any = None
    for row, kind in evidence.editor_requests(rows, limit=500):
        if kind != "copilot":
            continue
        if row.worker_id in rig_worker_ids:
            return Status("done", f"a Copilot request on {moment_text(row.at)} was served by rig worker "
                                  f"{row.worker_name}", _request_link(row.id))
        copilot_any = copilot_any or row
    if copilot_any is not None:
        return Status("partial", f"a Copilot request succeeded this week but was served by {copilot_any.worker_name}, "
                                 "which is not on a rig", _request_link(copilot_any.id))
    openai_on_rig = rows.filter(client="openai", worker_id__in=rig_worker_ids).order_by("-at").first()
    if openai_on_rig is not None:
        return Status("partial", "an OpenAI-compatible request reached a rig this week; no Copilot request yet",
                      _request_link(openai_on_rig.id))
    return Status("open", "no Copilot request was served this week")


def _runs() -> list[research_bridge.BenchmarkFact] | None:
    return research_bridge.benchmark_runs()


BASELINE_SCENARIOS = frozenset({"", *research_bridge.SCENARIOS_BASELINE})  # "": a plain `bench`
BENCH_HINT = "manage.py bench --base-url http://RIG-WORKER:PORT --model MODEL --concurrency 1"


def _by_kind(runs: list[research_bridge.BenchmarkFact]) -> dict[str, list[research_bridge.BenchmarkFact]]:
    kinds: dict[str, list[research_bridge.BenchmarkFact]] = {"rig": [], "rehearsal": [], "cpu": []}
    for run in runs:
        kinds[run.measured_on].append(run)
    return kinds


def _rig_rows(what: str, found: list[research_bridge.BenchmarkFact], hint: str) -> Status:
    """done on a run that measured a rig worker with real NVML samples; rehearsed on a rehearsal
    rig's; open otherwise (CPU runs are counted in words, never as evidence)."""
    kinds = _by_kind(found)
    if kinds["rig"]:
        latest = kinds["rig"][0]
        return Status("done", f"{len(kinds['rig'])} {what} run(s) on a rig; latest: {latest.model} on "
                              f"{latest.rig} ({latest.gpu_samples} GPU samples)", latest.url)
    if kinds["rehearsal"]:
        latest = kinds["rehearsal"][0]
        return Status("rehearsed", f"{len(kinds['rehearsal'])} {what} run(s) on rig {latest.rig}, whose GPUs are "
                                   "not real NVML GPUs: rehearsed, not done", latest.url)
    cpu = f"; {len(kinds['cpu'])} CPU-only run(s) do not count" if kinds["cpu"] else ""
    return Status("open", f"no {what} run on a rig yet{cpu}. Next: {hint}")


def baseline() -> Status:
    runs = _runs()
    if runs is None:
        return Status("open", "the research instrument is not installed here yet")
    return _rig_rows("baseline", [r for r in runs if r.scenario in BASELINE_SCENARIOS], BENCH_HINT)


def core_numbers() -> Status:
    runs = _runs()
    if runs is None:
        return Status("open", "the research instrument is not installed here yet")
    measured = [r for r in runs if r.generation_rate and r.ttft_ms_p50 and r.prompt_eval_rate]
    rates = _rig_rows("measured (tokens/s, TTFT, prompt eval)", measured, BENCH_HINT)
    cold = (WorkerEvent.objects.filter(worker__rig__isnull=False, cold_start_s__isnull=False)
            .select_related("worker").order_by("-at").first())
    cold_words = (f"cold start of {cold.worker.name}: {cold.cold_start_s:.0f} s to healthy" if cold else
                  "no rig worker's cold start recorded yet (the agent records it when a worker starts)")
    words = f"{rates.evidence}; {cold_words}"
    if rates.state == "done":
        return Status("done" if cold is not None else "partial", words, rates.link)
    if rates.state == "rehearsed" and cold is None:
        return Status("rehearsed", words, rates.link)
    return Status("partial" if cold is not None or rates.state == "rehearsed" else "open", words, rates.link)


def gpu_utilization() -> Status:
    sampled = Gpu.objects.filter(utilization_pct__isnull=False, sampled_at__isnull=False).select_related("rig")
    real = [g for g in sampled if NVML_UUID.match(g.uuid)]
    if not real:
        if sampled.exists():
            return Status("rehearsed", "GPU utilization was reported only by GPUs without a real NVML id (a rehearsal)")
        return Status("open", "no rig has reported GPU utilization (the rig agent does, with pynvml installed)")
    latest = max(real, key=lambda g: g.sampled_at or timezone.now())
    link = f"/admin/fleet/rig/{latest.rig_id}/change/"
    recent = [g for g in real if g.sampled_at and g.sampled_at >= timezone.now() - timedelta(hours=24)]
    if recent:
        return Status("done", f"{len(recent)} GPU(s) reported utilization in the last 24 h", link)
    return Status("partial", "GPU utilization was reported, but not in the last 24 h", link)


def allocation() -> Status:
    """Two logical-worker layouts of one model measured on rigs: done. The scenario's name is not
    evidence: the CPU `allocation` scenario splits CPU threads, not GPUs."""
    runs = _runs()
    if runs is None:
        return Status("open", "the research instrument is not installed here yet")
    kinds = _by_kind(runs)
    layouts: dict[str, set[str]] = {}
    for run in kinds["rig"]:
        layouts.setdefault(run.model, set()).add(run.layout)
    best = max(layouts.items(), key=lambda item: len(item[1]), default=("", set()))
    if len(best[1]) >= 2:
        return Status("done", f"{best[0]} measured on {len(best[1])} logical-worker layouts on rigs "
                              f"({', '.join(sorted(best[1]))})", kinds["rig"][0].url)
    hint = "measure one worker layout with bench, change the rig's [[workers]] in rig.toml, measure again"
    if best[1]:
        return Status("partial", f"{best[0]} measured on one layout only ({next(iter(best[1]))}). Next: {hint}",
                      kinds["rig"][0].url)
    if kinds["rehearsal"]:
        return Status("rehearsed", "only a rehearsal rig's runs so far", kinds["rehearsal"][0].url)
    cpu = len([r for r in kinds["cpu"] if r.scenario in research_bridge.SCENARIOS_ALLOCATION])
    stand_in = f"; {cpu} CPU allocation run(s) (threads, not GPUs) do not count" if cpu else ""
    return Status("open", f"no rig run yet{stand_in}. Next: {hint}")


def yarn() -> Status:
    runs = _runs()
    if runs is None:
        return Status("open", "the research instrument is not installed here yet")
    return _rig_rows("YaRN large-context", [r for r in runs if r.yarn],
                     "start a rig worker with rope_scaling = \"yarn\" in rig.toml, then " + BENCH_HINT
                     + " --prompt-tokens 8192")


def deployment_path() -> Status:
    """done: the latest `verify_path` run passed, over TLS, against a public https:// address.
    A rig that reports and serves, or a pass on a private or plain-http address, is partial."""
    latest = PathVerification.objects.order_by("-checked_at").first()
    if latest is not None and latest.passed and latest.tls_ok and is_public_https(latest.base_url):
        return Status("done", f"verify_path passed against {latest.base_url} (TLS) on "
                              f"{moment_text(latest.checked_at)}")
    silent = timedelta(seconds=settings.OCS["RIG_SILENT_S"])
    live_rigs = Rig.objects.filter(last_heartbeat_at__gte=timezone.now() - silent)
    serving = Worker.objects.filter(rig__in=live_rigs, state__in=["healthy", "degraded"]).select_related("rig").first()
    found = []
    if latest is not None:
        why = ("it failed" if not latest.passed else "not over TLS" if not latest.tls_ok
               else "not a public https address")
        found.append(f"the latest verify_path ({latest.base_url}, {moment_text(latest.checked_at)}) does "
                     f"not count: {why}")
    if serving is not None:
        found.append(f"rig {serving.rig.name if serving.rig else ''} reports and its worker {serving.name} is "
                     f"{serving.state}")
    hint = "manage.py verify_path --base-url https://PUBLIC-HOST --api-key KEY on the control plane"
    if found:
        return Status("partial", "; ".join(found) + f". Next: {hint}",
                      f"/admin/fleet/worker/{serving.id}/change/" if serving else "")
    return Status("open", f"no verify_path run and no rig reporting. Next: {hint}")


def one_to_n_workers() -> Status:
    rigs = Rig.objects.annotate(n=Count("workers", filter=~Q(workers__state="disabled"))).order_by("-n")
    top = rigs.first()
    if top is None or not top.n:
        return Status("open", "no rig has reported a worker")
    link = f"/admin/fleet/rig/{top.id}/change/"
    if top.n >= 2:
        return Status("done", f"rig {top.name} runs {top.n} logical workers", link)
    return Status("partial", f"rig {top.name} runs 1 worker; N > 1 not shown yet", link)


def health_failover() -> Status:
    went_down = WorkerEvent.objects.filter(to_state="down").select_related("worker").order_by("-at").first()
    recovered = (WorkerEvent.objects.filter(to_state="healthy", from_state="down", at__gte=went_down.at).exists()
                 if went_down else False)
    failed_over = evidence.served(RequestLog.objects.filter(retries__gt=0)).order_by("-at").first()
    found = []
    if went_down is not None:
        found.append(f"worker {went_down.worker.name} went down ({went_down.reason})"
                     + (" and came back" if recovered else ""))
    if failed_over is not None:
        found.append(f"request #{failed_over.id} failed over past {failed_over.retries} worker(s) and was served")
    link = _request_link(failed_over.id) if failed_over else (
        f"/admin/fleet/worker/{went_down.worker_id}/change/" if went_down else "")
    if went_down is not None and recovered and failed_over is not None:
        return Status("done", "; ".join(found), link)
    if found:
        return Status("partial", "; ".join(found), link)
    return Status("open", "no health events and no failed-over request recorded")


def teachable_summary() -> Status:
    if not SUMMARY_PATH.is_file():
        return Status("open", "docs/ground0.md is missing")
    cohort = student_cohort()
    counted = f"students finished Ground 0: {len(cohort.finished)} of {cohort.total}"
    if cohort.total and not cohort.missing:
        return Status("done", f"docs/ground0.md and the lessons exist; {counted}", "/lessons/teacher/")
    return Status("partial", f"docs/ground0.md and the lessons exist; {counted}", "/lessons/teacher/")


DERIVED: list[tuple[str, str, str, Callable[[], Status]]] = [
    ("copilot-path", "A verified Copilot / OpenAI-compatible path through the control plane to a rig",
     "done: a Copilot request was served this week by a worker on a rig; partial: Copilot served elsewhere, or "
     "only an OpenAI-route request reached a rig", copilot_path),
    ("baseline", "Baseline measurements of the big model",
     "done: a finished run (the nightly baseline, or a plain `manage.py bench --base-url` against a rig worker) "
     "that measured a rig worker with GPU samples from real NVML GPUs; rehearsed: the same on a rehearsal rig; "
     "CPU-only runs never count", baseline),
    ("core-numbers", "Tokens/s, TTFT, prompt eval and cold-start numbers",
     "done: a rig run with all three rates (as for the baseline) and a rig worker's recorded cold start (the "
     "agent records seconds from process start to healthy)", core_numbers),
    ("gpu-utilization", "Per-GPU utilization",
     "done: GPUs with real NVML ids reported utilization in the last 24 h (the rig agent: "
     "`manage.py rig_agent --config rig.toml`, with pynvml installed)", gpu_utilization),
    ("allocation", "GPU-allocation comparisons",
     "done: one model measured on rigs (as for the baseline) under two logical-worker layouts (different workers "
     "or GPU sets); the CPU `bench --scenario allocation` stand-in splits threads, not GPUs, and never counts",
     allocation),
    ("yarn", "YaRN large-context measurements",
     "done: a rig run (as for the baseline) whose worker was launched with YaRN rope scaling", yarn),
    ("deployment", "The deployment path: EC2 control plane, NetBird, rigs",
     "done: the latest `manage.py verify_path --base-url https://… --api-key …` passed, with its TLS hop, "
     "against a public https address; partial: a rig reports and serves, or verify_path passed elsewhere",
     deployment_path),
    ("workers-1-n", "1..N logical workers per rig",
     "done: one rig reports two or more (not disabled) workers (two [[workers]] in rig.toml, then "
     "`manage.py rig_agent --config rig.toml`)", one_to_n_workers),
    ("health-failover", "Health checks and failover",
     "done: a worker went down and came back (worker events) and a request failed over and was served",
     health_failover),
    ("summary", "The teachable summary",
     "done: docs/ground0.md exists and every active student has finished Ground 0", teachable_summary),
]

MANUAL: list[tuple[str, str, str]] = [
    ("contracts", "Worker and scheduler contracts written down and agreed",
     "manual: a teacher ticks it once the team has reviewed docs/agent-api.md and docs/fleet.md"),
]

MANUAL_SLUGS = frozenset(slug for slug, _, _ in MANUAL)


def deliverables() -> list[Deliverable]:
    achieved = {a.deliverable: a for a in DeliverableAchieved.objects.all()}
    rows = [Deliverable(slug, title, rule, False, evaluate(), achieved.get(slug))
            for slug, title, rule, evaluate in DERIVED]
    ticks = {c.deliverable: c for c in ManualCheck.objects.select_related("ticked_by")}
    for slug, title, rule in MANUAL:
        tick = ticks.get(slug)
        if tick is None:
            status = Status("open", "not ticked yet")
        else:
            status = Status("done", tick.note or "ticked", ticked_by=tick.ticked_by.get_username()
                            if tick.ticked_by else "(deleted user)", ticked_at=moment_text(tick.ticked_at))
        rows.append(Deliverable(slug, title, rule, True, status, achieved.get(slug)))
    return rows


STATES = ("done", "rehearsed", "partial", "open")
