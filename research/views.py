"""The research pages (/research/): staff only. Anonymous visitors go to the sign-in page;
signed-in students get 403. Views parse, call a selector and render."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET, require_POST
from django.utils.safestring import mark_safe

from accounts.access import staff_required
from accounts.models import User
from fleet.models import Worker
from research import selectors
from research.class_personas import PERSONAS
from research.forms import PlanClassForm
from research.models import Baseline, BenchmarkRun, Calibration, Experiment, PlannerCheck, WebRun
from research.planner.assumptions import RigAssumptions
from research.planner.report import plan_sentence, sweep_chart, sweep_table
from research.planner.rigs_report import best_per_model, curves_chart, table_rows
from research.planner.validation.records import configurations_text, noise_text
from research.planner_services import calibration_assume, class_plan, plan_class
from research.rig_baseline import STEPS
from research.web_runs import BOUNDS, RunAsk, WebRunRefused, web_run_start, web_runs_expire

LOGIN_URL = "/accounts/login/"
View = Callable[..., HttpResponse]


def _charts(markup: list[str]) -> list[str]:
    return [mark_safe(chart) for chart in markup]  # built by research.svg, every text escaped


@staff_required
def index(request: HttpRequest) -> HttpResponse:
    slos, checks = selectors.gate_overview()
    return render(request, "research/index.html", {
        "runs": selectors.runs_recent(), "experiments": selectors.experiments_all(), "slos": slos, "checks": checks,
    })


@staff_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(BenchmarkRun.objects.select_related("worker", "experiment"), pk=run_id)
    group = selectors.group_runs(run.group)
    if run.kind == BenchmarkRun.Kind.CLASS_REPLAY:
        return render(request, "research/replay_detail.html", {
            "run": run, "group": group, "charts": _charts(selectors.replay_charts(run)),
            "personas": sorted((run.summary.get("per_persona") or {}).items()),
            "students": run.summary.get("per_student") or [], "config": run.summary.get("config") or run.launch,
            "launch_json": json.dumps(run.launch, indent=2, default=str),
        })
    if run.kind == BenchmarkRun.Kind.PROBE:
        return render(request, "research/probe_detail.html", {
            "run": run, "summary_json": json.dumps(run.summary, indent=2, default=str),
            "phases": [(name, run.summary[name]) for name in ("alone", "load", "lane_alone", "without_lanes")
                       if isinstance(run.summary.get(name), dict)],
        })
    return render(request, "research/run_detail.html", {
        "run": run, "group": group, "latency_charts": _charts(selectors.latency_charts(run)),
        "throughput_chart": mark_safe(selectors.throughput_chart(group)) if len(group) > 1 else None,
        "gpu_charts": _charts(selectors.gpu_charts(run)),
        "launch_json": json.dumps(run.launch, indent=2, default=str),
    })


@staff_required
def group_detail(request: HttpRequest, group: str) -> HttpResponse:
    runs = selectors.group_runs(group)
    if not runs:
        raise Http404("no such group")
    return render(request, "research/group_detail.html", {
        "group": group, "runs": runs, "throughput_chart": mark_safe(selectors.throughput_chart(runs)),
    })


def _side(value: str) -> tuple[str, list[BenchmarkRun]]:
    """'12' or 'run:12' is a run, 'group:abc' a group; anything else is 404."""
    value = value.strip()
    if value.startswith("group:"):
        runs = selectors.group_runs(value[6:])
        if runs:
            return "group", runs
    else:
        number = value[4:] if value.startswith("run:") else value
        if number.isdigit():
            run = BenchmarkRun.objects.filter(pk=int(number)).first()
            if run is not None:
                return "run", [run]
    raise Http404(f"nothing to compare called {value[:40]!r}")


@staff_required
def compare(request: HttpRequest) -> HttpResponse:
    a_text, b_text = request.GET.get("a", ""), request.GET.get("b", "")
    context: dict[str, Any] = {"a_text": a_text, "b_text": b_text}
    if a_text and b_text:
        a_kind, a_runs = _side(a_text)
        b_kind, b_runs = _side(b_text)
        if a_kind == "run" and b_kind == "run":
            context["sections"] = [("", selectors.compare_runs(a_runs[0], b_runs[0]))]
        else:
            context["sections"] = selectors.compare_groups(a_runs, b_runs)
        context.update(a_runs=a_runs, b_runs=b_runs,
                       throughput_chart=mark_safe(selectors.throughput_chart(a_runs + b_runs)))
    return render(request, "research/compare.html", context)


@staff_required
def run_export(request: HttpRequest, run_id: int, fmt: str) -> HttpResponse:
    run = get_object_or_404(BenchmarkRun, pk=run_id)
    if fmt not in ("csv", "json"):
        raise Http404("export as .csv or .json")
    if fmt == "csv":
        response = HttpResponse(selectors.samples_csv(run), content_type="text/csv")
    else:
        response = HttpResponse(json.dumps(selectors.run_json(run), indent=2, default=str),
                                content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.{fmt}"'
    return response


@staff_required
def group_export(request: HttpRequest, group: str, fmt: str) -> HttpResponse:
    runs = selectors.group_runs(group)
    if not runs or fmt not in ("csv", "json"):
        raise Http404("no such group, or not .csv or .json")
    if fmt == "csv":
        response = HttpResponse(selectors.runs_csv(runs), content_type="text/csv")
    else:
        body = {"group": group, "runs": [selectors.run_json(run, with_samples=False) for run in runs]}
        response = HttpResponse(json.dumps(body, indent=2, default=str), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="group-{group}.{fmt}"'
    return response


@staff_required
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    runs = list(experiment.runs.select_related("worker"))
    return render(request, "research/experiment_detail.html", {
        "experiment": experiment, "runs": runs,
        "throughput_chart": mark_safe(selectors.throughput_chart(runs)) if runs else None,
    })


def _ask_from(post: Any) -> RunAsk:
    try:
        numbers = {field: int(post.get(field, "")) for field in BOUNDS}
        worker_id = int(post.get("worker", ""))
    except ValueError:
        raise WebRunRefused("Pick a worker and give every size as a whole number.") from None
    what = post.get("what") or WebRun.What.LEVEL
    try:
        idle = tuple(float(part) for part in str(post.get("idle", "")).split(",") if part.strip())
        max_context = int(post["max_context"]) if post.get("max_context") else None
    except ValueError:
        raise WebRunRefused("Give the idle gaps as seconds separated by commas (60,300,900) and the largest "
                            "sweep prompt as a whole number.") from None
    return RunAsk(worker_id=worker_id, via_gateway=post.get("via_gateway") == "on", label=post.get("label", ""),
                  what=what, idle_s=idle, max_context=max_context, **numbers)


@staff_required
def start(request: HttpRequest) -> HttpResponse:
    """Start a run from the web: GET the form and the recent web runs, POST to start one."""
    if request.method == "POST":
        assert isinstance(request.user, User)
        try:
            web_run = web_run_start(ask=_ask_from(request.POST), by=request.user,
                                    gateway_url=settings.OCS_RUNS_BASE_URL)
        except WebRunRefused as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect("/research/start/")
        return HttpResponseRedirect(f"/research/start/{web_run.id}/")
    web_runs_expire()
    workers = Worker.objects.exclude(state=Worker.State.DISABLED).select_related("model", "pool").order_by("name")
    return render(request, "research/start.html", {
        "workers": workers, "bounds": BOUNDS, "steps": ", ".join(STEPS),
        "web_runs": WebRun.objects.select_related("worker", "run", "baseline")[:20]})


@staff_required
@require_GET
def web_run_detail(request: HttpRequest, web_run_id: int) -> HttpResponse:
    web_runs_expire()
    web_run = get_object_or_404(WebRun.objects.select_related("worker", "run", "requested_by"), pk=web_run_id)
    return render(request, "research/web_run.html", {"web_run": web_run})


@staff_required
@require_GET
def baseline_detail(request: HttpRequest, baseline_id: int) -> HttpResponse:
    """One rig baseline: its steps in order, each with its runs, the engine-only rows and the cold
    start's facts; the Markdown report's path."""
    baseline = get_object_or_404(Baseline.objects.select_related("worker"), pk=baseline_id)
    runs = {run.pk: run for run in baseline.runs.all()}
    steps = [{**step, "runs": [runs[i] for i in step["run_ids"] if i in runs]} for step in baseline.steps]
    return render(request, "research/baseline.html", {"baseline": baseline, "steps": steps})


@staff_required
@require_GET
def rigs(request: HttpRequest) -> HttpResponse:
    """"Plan the rigs": the newest stored `plan_rigs` search (too slow for a page request), ranked,
    with its assumptions and the command that refreshes it."""
    stored = selectors.rig_plan_latest()
    context: dict[str, Any] = {"stored": stored}
    if stored is not None:
        result = stored.result
        context.update(result=result, rows=table_rows(result, top=RIG_PLAN_ROWS), best=best_per_model(result),
                       total=len(result["rows"]), shown=min(RIG_PLAN_ROWS, len(result["rows"])),
                       chart=mark_safe(curves_chart(result)))  # research.svg escapes every text
    return render(request, "research/rigs.html", context)


RIG_PLAN_ROWS = 25


@staff_required
@require_GET
def web_run_progress(request: HttpRequest, web_run_id: int) -> HttpResponse:
    web_run = get_object_or_404(WebRun, pk=web_run_id)
    return JsonResponse(web_run.progress())


@staff_required
def plan(request: HttpRequest) -> HttpResponse:
    """"Plan a class": the planner's sweep (plan_class) from a form, on a stored calibration."""
    latest = Calibration.objects.order_by("-pk").first()
    form = PlanClassForm(request.GET or None, initial={"calibration": latest.pk if latest else None})
    context: dict[str, Any] = {"form": form, "no_calibration": latest is None}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        calibration = data["calibration"]
        planned = class_plan(calibration=calibration, mix=data["mix"], workers=data["workers"], slots=data["slots"],
                             context=data["context"], cache_type=data["cache_type"] or None,
                             duration_s=data["duration"], scale=data["scale"], seed=data["seed"],
                             policy=data["policy"] or None, replicates=data["replicates"] or 1)
        result = plan_class(calibration=calibration, plan=planned, sizes=data["students"],
                            target_p95_s=data["target_p95"])
        personas = [p for p in PERSONAS if p in data["mix"]]
        fleet = planned.fleet
        table = sweep_table(result["rows"], personas)
        context.update(
            result=result, fleet=fleet, personas=personas, table=table,
            sentence=plan_sentence(table, target_p95_s=data["target_p95"]),
            largest=result["largest_class"] if result["fits_memory"] else 0, calibration=calibration,
            chart=mark_safe(sweep_chart(result["rows"], personas,  # research.svg escapes every text
                                        title=f"Predicted p95 TTFT, {fleet.workers} x {fleet.slots} slots")),
        )
    return render(request, "research/plan.html", context)


@staff_required
@require_POST
def plan_assume(request: HttpRequest) -> HttpResponse:
    """A calibration of one rig worker (8 GTX 1070s, the seed's 27B) from the stated assumptions,
    as `calibrate_worker --assumptions --gpus 8` makes it, so that a fresh install can plan."""
    calibration = calibration_assume(rig=RigAssumptions())
    messages.success(request, "Made a calibration from the rigs' published figures (assumptions, not measurements).")
    return HttpResponseRedirect(f"/research/plan/?calibration={calibration.pk}&" + PlanClassForm.initial_query())


@staff_required
@require_GET
def checks(request: HttpRequest) -> HttpResponse:
    """The planner's predict-then-measure checks: how far the planner has been checked."""
    return render(request, "research/checks.html", {"checks": selectors.planner_checks_all()})


@staff_required
@require_GET
def check_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One check: per configuration and figure, predicted against each replay, the verdict, the noise."""
    check = get_object_or_404(PlannerCheck, name=name)
    return render(request, "research/check_detail.html", {
        "check": check, "sections": selectors.planner_check_sections(check),
        "noise": noise_text(check.noise), "class_text": configurations_text(check.configurations)})
