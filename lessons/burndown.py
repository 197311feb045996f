"""The Ground 0 burndown: the phase's deliverables, each with a status read from evidence in
the system, or a manual check a teacher ticked. Reads only (ticking is lessons.services).

Statuses: `done`, `partial` (some evidence, not all), `open` (no evidence yet). A manual
deliverable is `done` while a ManualCheck row exists (who ticked it, when) and `open` otherwise.
Statuses are computed on every view, so they follow the evidence as it is added and removed.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from fleet.models import Gpu, Rig, Worker, WorkerEvent
from inference.models import RequestLog
from lessons import evidence, research_bridge
from lessons.models import ManualCheck

SUMMARY_PATH = Path(settings.BASE_DIR) / "docs" / "ground0.md"
START_PATH = Path(settings.BASE_DIR) / "docs" / "start-here.md"
WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Status:
    state: str  # done | partial | open
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
    status: Status


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
            return Status("done", f"a Copilot request on {row.at:%Y-%m-%d %H:%M} was served by rig worker "
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


def _runs_status(scenarios: Iterable[str], what: str, *, need: int = 1,
                 extra: Callable[[research_bridge.BenchmarkFact], bool] | None = None) -> Status:
    runs = _runs()
    if runs is None:
        return Status("open", "the research instrument is not installed here yet")
    found = [r for r in research_bridge.runs_of(runs, scenarios) if extra is None or extra(r)]
    if len(found) >= need:
        return Status("done", f"{len(found)} finished {what} run(s); latest: {found[0].model}", found[0].url)
    if found:
        return Status("partial", f"{len(found)} of {need} {what} runs", found[0].url)
    return Status("open", f"no finished {what} run yet")


def baseline() -> Status:
    return _runs_status(research_bridge.SCENARIOS_BASELINE, "baseline")


def core_numbers() -> Status:
    runs = _runs()
    if runs is None:
        return Status("open", "the research instrument is not installed here yet")
    measured = [r for r in runs if r.generation_rate and r.ttft_ms_p50 and r.prompt_eval_rate]
    cold = research_bridge.runs_of(runs, research_bridge.SCENARIOS_COLD)
    if measured and cold:
        return Status("done", "tokens/s, TTFT and prompt eval measured; a cold-vs-warm run exists", cold[0].url)
    if measured or cold:
        have = "cold-vs-warm run" if cold else "tokens/s, TTFT and prompt eval"
        return Status("partial", f"only the {have} so far", (cold or measured)[0].url)
    return Status("open", "no run with these numbers yet")


def gpu_utilization() -> Status:
    sampled = Gpu.objects.filter(utilization_pct__isnull=False, sampled_at__isnull=False).select_related("rig")
    recent = sampled.filter(sampled_at__gte=timezone.now() - timedelta(hours=24))
    latest = recent.order_by("-sampled_at").first() or sampled.order_by("-sampled_at").first()
    if latest is None:
        return Status("open", "no rig has reported GPU utilization")
    link = f"/admin/fleet/rig/{latest.rig_id}/change/"
    if recent.exists():
        return Status("done", f"{recent.count()} GPU(s) reported utilization in the last 24 h", link)
    return Status("partial", "GPU utilization was reported, but not in the last 24 h", link)


def allocation() -> Status:
    return _runs_status(research_bridge.SCENARIOS_ALLOCATION, "GPU-allocation comparison", need=2)


def yarn() -> Status:
    return _runs_status(research_bridge.SCENARIOS_YARN, "YaRN large-context", extra=lambda r: r.yarn)


def deployment_path() -> Status:
    silent = timedelta(seconds=settings.OCS["RIG_SILENT_S"])
    live_rigs = Rig.objects.filter(last_heartbeat_at__gte=timezone.now() - silent)
    serving = Worker.objects.filter(rig__in=live_rigs, state__in=["healthy", "degraded"]).select_related("rig").first()
    if serving is not None:
        return Status("done", f"rig {serving.rig.name if serving.rig else ''} is reporting and its worker "
                              f"{serving.name} is {serving.state}", f"/admin/fleet/worker/{serving.id}/change/")
    reported = Rig.objects.filter(last_heartbeat_at__isnull=False).order_by("-last_heartbeat_at").first()
    if reported is not None:
        return Status("partial", f"rig {reported.name} has reported, but no rig worker is serving now",
                      f"/admin/fleet/rig/{reported.id}/change/")
    return Status("open", "no rig agent has reported to this control plane")


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
    from lessons.selectors import student_cohort

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
     "done: a finished baseline benchmark run (the nightly baseline, or bench --scenario baseline)", baseline),
    ("core-numbers", "Tokens/s, TTFT, prompt eval and cold-start numbers",
     "done: a run with all three rates and a cold-vs-warm run", core_numbers),
    ("gpu-utilization", "Per-GPU utilization",
     "done: rig agents reported GPU utilization in the last 24 h", gpu_utilization),
    ("allocation", "GPU-allocation comparisons",
     "done: two finished allocation runs (one logical-worker layout against another)", allocation),
    ("yarn", "YaRN large-context measurements",
     "done: a finished context-sweep run whose worker was launched with YaRN", yarn),
    ("deployment", "The deployment path: EC2 control plane, NetBird, rigs",
     "done: a rig is sending heartbeats and one of its workers is serving", deployment_path),
    ("workers-1-n", "1..N logical workers per rig",
     "done: one rig reports two or more (not disabled) workers", one_to_n_workers),
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
    rows = [Deliverable(slug, title, rule, False, evaluate()) for slug, title, rule, evaluate in DERIVED]
    ticks = {c.deliverable: c for c in ManualCheck.objects.select_related("ticked_by")}
    for slug, title, rule in MANUAL:
        tick = ticks.get(slug)
        if tick is None:
            status = Status("open", "not ticked yet")
        else:
            status = Status("done", tick.note or "ticked", ticked_by=tick.ticked_by.get_username()
                            if tick.ticked_by else "(deleted user)", ticked_at=f"{tick.ticked_at:%Y-%m-%d %H:%M} UTC")
        rows.append(Deliverable(slug, title, rule, True, status))
    return rows
