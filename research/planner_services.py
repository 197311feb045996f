"""The planner's state changes and reads: calibrations from stored runs or from assumptions, and
planning a class from a stored calibration (the pure work is research/planner/)."""
from __future__ import annotations

import dataclasses
import datetime
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.models import Worker
from fleet.scheduler import LANE_TOKENS
from research.models import BenchmarkRun, Calibration, PlannerCheck, PlannerCheckFigure, RequestSample, RigPlan
from research.planner.assumptions import RigAssumptions, assumed_cost, memory_check
from research.planner.cost import CostModel, TokenModel
from research.planner.fit import Fit, Measured, SlotFileSample, fit_contention, fit_cost_model, fit_slot_files
from research.planner.plan import DEFAULT_REPLICATES, ClassPlan, largest_class, sweep
from research.planner.rigs import ModelCandidate, Rig, SearchRow, Targets
from research.planner.rigs import search as rig_search
from research.planner.sim import FleetPlan
from research.planner.tokens import SAMPLE_SCALE, measure_tokens, sample_parts
from research.planner.validation.records import check_fields, figure_rows


class CalibrationRefused(ValueError):
    """The runs cannot calibrate a cost model (none found, or no usable requests); plain message."""


def runs_of_worker(name: str) -> list[BenchmarkRun]:
    """The finished load-level runs sent straight to the worker `name`."""
    return list(BenchmarkRun.objects.filter(worker__name=name, kind=BenchmarkRun.Kind.LEVEL,
                                            target=BenchmarkRun.Target.WORKER, status=BenchmarkRun.Status.DONE)
                .select_related("worker").order_by("id"))


def measured_requests(runs: Sequence[BenchmarkRun]) -> list[Measured]:
    """The measured (not warm-up, ok) requests of `runs`, in seconds."""
    concurrency = {run.pk: run.concurrency or 1 for run in runs}
    rows = RequestSample.objects.filter(run_id__in=list(concurrency), ok=True, warmup=False).order_by("run_id", "index")
    return [Measured(run_id=row.run_id, concurrency=concurrency[row.run_id], prompt_tokens=row.prompt_tokens,
                     cached_tokens=row.cached_tokens or 0, output_tokens=row.output_tokens,
                     ttft_s=None if row.ttft_ms is None else row.ttft_ms / 1000,
                     tpot_s=None if row.tpot_ms is None or row.output_tokens < 2 else row.tpot_ms / 1000,
                     step_s=statistics.median(row.inter_chunk_gaps_ms) / 1000 if row.inter_chunk_gaps_ms else None)
            for row in rows]


def worker_token_counter(base_url: str, api_key: str | None = None) -> Callable[[list[dict[str, Any]]], int]:
    """Counts a chat prompt's tokens as the llama-server at `base_url` does: its chat template
    (`/apply-template`) then its tokenizer (`/tokenize`). Runs no model."""
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = httpx.Client(timeout=30.0, headers=headers)

    def count(messages: list[dict[str, Any]]) -> int:
        try:
            templated = client.post(root + "/apply-template", json={"messages": messages})
            templated.raise_for_status()
            tokens = client.post(root + "/tokenize", json={"content": templated.json()["prompt"], "add_special": True,
                                                           "parse_special": True})
            tokens.raise_for_status()
            return len(tokens.json()["tokens"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise CalibrationRefused(f"could not count tokens at {root}: {type(exc).__name__}: {exc}") from None

    return count


def count_tokens(base_url: str, api_key: str | None = None, *,
                 scale: float = SAMPLE_SCALE) -> tuple[TokenModel, dict[str, Any]]:
    """The worker's TokenModel over the personas' segments at `scale` (research/planner/tokens.py),
    and what it rests on, the scale included."""
    model, basis = measure_tokens(worker_token_counter(base_url, api_key), sample_parts(scale=scale))
    return model, {**basis, "scale": scale}


# The slot file probe: its file's name on the worker (one file, overwritten at every probe), and the
# prompts it puts in the slot first (a sentence repeated: about one token a word with any tokenizer).
PROBE_FILE = "ocs-calibration-probe.bin"
PROBE_WORDS = (120, 480, 1200)
PROBE_SENTENCE = "the students read the notes and wrote down what the worker did next "
PROBE_REPEATS = 3


def probe_text(words: int) -> str:
    """The slot file probe's prompt of `words` words (PROBE_SENTENCE repeated)."""
    sentence = PROBE_SENTENCE.split()
    return " ".join(sentence[i % len(sentence)] for i in range(words))


def measure_slot_files(base_url: str, api_key: str | None = None, *, slot: int = 0,
                       words: Sequence[int] = PROBE_WORDS,
                       repeats: int = PROBE_REPEATS) -> tuple[float, float, dict[str, Any]]:
    """How long the worker's loop spends saving and restoring a slot file, per token
    (CostModel.slot_save_s_per_token, slot_restore_s_per_token), and the fit's basis: a prompt of
    each size in `words` is evaluated in `slot`, then saved to and restored from one probe file
    `repeats` times, each timed by llama-server itself (the `timings` of its answer: the task's
    time in the loop's thread, no HTTP). Leaves the slot erased. Needs the worker up with
    --slot-save-path (the platform's launcher sets it) and not serving students (their turns
    would wait for the slot, and find it emptied)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    samples: list[SlotFileSample] = []
    try:
        with httpx.Client(timeout=300.0, headers=headers) as client:
            for size in words:
                evaluated = client.post(root + "/completion", json={"prompt": probe_text(size), "id_slot": slot,
                                                                    "n_predict": 1, "cache_prompt": True})
                evaluated.raise_for_status()
                for _ in range(repeats):
                    for action, count, timing in (("save", "n_saved", "save_ms"), ("restore", "n_restored", "restore_ms")):
                        answer = client.post(f"{root}/slots/{slot}?action={action}", json={"filename": PROBE_FILE})
                        if answer.status_code == 501:
                            raise CalibrationRefused(
                                f"{root} has no slot files (started without --slot-save-path): its handovers cost no "
                                f"saves or restores; calibrate without --slot-files and plan with slot files off")
                        answer.raise_for_status()
                        body = answer.json()
                        samples.append(SlotFileSample(action, int(body[count]), float(body["timings"][timing]) / 1000))
            client.post(f"{root}/slots/{slot}?action=erase").raise_for_status()
    except CalibrationRefused:
        raise
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise CalibrationRefused(f"could not time slot files at {root}: {type(exc).__name__}: {exc}") from None
    save, restore, basis = fit_slot_files(samples)
    return save, restore, {**basis, "slot": slot, "repeats": repeats}


def calibration_fit(*, runs: Sequence[BenchmarkRun], label: str = "", tokens: TokenModel | None = None,
                    tokens_basis: dict[str, Any] | None = None, loaded_runs: Sequence[BenchmarkRun] = (),
                    loaded_workers: int = 2, load_factor: float = 1.0,
                    slot_files: tuple[float, float, dict[str, Any]] | None = None) -> tuple[Calibration, Fit]:
    """Fits a cost model to `runs` (all of one worker, benched alone) and stores it, with `tokens`
    (the worker's token counts, measured by `count_tokens`) in it if given, the contention
    fitted from `loaded_runs` (the same worker benched while `loaded_workers` workers of its host,
    it included, were benched at once; none: contention 0), and `load_factor` (CostModel: the
    worker's speed under a class against these benches, measured apart; the fit and its residuals
    are the benches' own), and `slot_files` (seconds per token of a save and of a restore, and
    their basis, from `measure_slot_files`; none: handovers' slot files taken as free)."""
    if not load_factor > 0:
        raise CalibrationRefused("--load-factor is a ratio of times: > 0 (1: the benches' speed)")
    if not runs:
        raise CalibrationRefused("no finished benchmark runs to calibrate from")
    workers = {run.worker_id for run in [*runs, *loaded_runs]}
    if len(workers) > 1:
        raise CalibrationRefused(f"the runs are of {len(workers)} different workers: calibrate one worker at a time")
    first = runs[0]
    worker = first.worker
    launch = first.launch or {}
    slots = int(launch.get("slots") or (worker.slots if worker else 0) or max(r.concurrency or 1 for r in runs))
    context = (worker.context_per_slot if worker and worker.context_per_slot else None) or launch.get("context")
    cache_type = str(launch.get("cache_type_k") or launch.get("cache_type") or "f16")
    try:
        fit = fit_cost_model(measured_requests(runs), slots=slots, cache_type=cache_type)
    except ValueError as exc:
        raise CalibrationRefused(str(exc)) from None
    if loaded_runs:
        try:
            contention, basis, notes = fit_contention(fit.cost, measured_requests(loaded_runs), slots=slots,
                                                      others=loaded_workers - 1)
        except ValueError as exc:
            raise CalibrationRefused(str(exc)) from None
        fit.cost = dataclasses.replace(fit.cost, contention=contention)
        fit.residuals["contention"] = {**basis, "runs": [run.pk for run in loaded_runs]}
        fit.notes += notes
    else:
        fit.notes.append("no loaded runs: contention 0 (workers that do not share compute; on a shared host, bench "
                         "the workers at once too and pass --loaded-label)")
    if tokens is not None:
        fit.cost = dataclasses.replace(fit.cost, tokens=tokens)
        fit.residuals["tokens"] = tokens_basis or {}
    else:
        fit.notes.append("no token counts: the planner counts 4 characters a token (calibrate_worker --count-tokens)")
    if slot_files is not None:
        save, restore, slot_basis = slot_files
        fit.cost = dataclasses.replace(fit.cost, slot_save_s_per_token=save, slot_restore_s_per_token=restore)
        fit.residuals["slot_files"] = slot_basis
    else:
        fit.notes.append("no slot file costs: a handover's save and restore planned as free (calibrate_worker "
                         "--slot-files, with the worker up)")
    if load_factor != 1.0:
        fit.cost = dataclasses.replace(fit.cost, load_factor=load_factor)
        fit.notes.append(f"load factor x{load_factor:g}: every step and request overhead planned at {load_factor:g} "
                         f"times its fitted time (the worker's speed under a class, measured apart from these runs)")
    calibration = Calibration.objects.create(
        label=label or f"{worker.name if worker else first.base_url}: runs {', '.join(str(r.pk) for r in runs)}",
        source=Calibration.Source.RUNS, worker=worker, runs=[run.pk for run in [*runs, *loaded_runs]],
        cost=fit.cost.as_dict(),
        residuals=fit.residuals, notes=fit.notes, slots=slots,
        context=int(context) if context else None,
    )
    return calibration, fit


def calibration_assume(*, rig: RigAssumptions, label: str = "") -> Calibration:
    """A calibration built from stated assumptions (research/planner/assumptions.py), stored."""
    cost, assumptions, memory = assumed_cost(rig)
    return Calibration.objects.create(
        label=label or (f"assumed: {rig.gpus} x {rig.gpu}, {rig.weight_gb:g} GB of weights read per token"
                        + (f" ({rig.held_weight_gb:g} GB held)" if rig.total_weight_gb is not None else "")
                        + f", KV {rig.cache_type}"),
        source=Calibration.Source.ASSUMPTIONS, cost=cost.as_dict(), memory=memory,
        assumptions=[a.as_dict() for a in assumptions],
        notes=["built from assumptions: replace with calibrate_worker --worker NAME after a rig day"],
    )


def plan_class(*, calibration: Calibration, plan: ClassPlan, sizes: Sequence[int], target_p95_s: float
               ) -> dict[str, Any]:
    """The sweep over `sizes` on `calibration`'s cost model: rows (class size, the replay JSON
    predicted), the answer, and the memory check of the configuration."""
    cost = CostModel.from_dict(calibration.cost)
    cache_type = plan.fleet.cache_type or cost.cache_type
    fits, memory_detail = memory_check(calibration.memory, slots=plan.fleet.slots,
                                       context_tokens=plan.fleet.context_tokens, cache_type=cache_type)
    provenance = {"id": calibration.pk, "label": calibration.label, "source": calibration.source,
                  "runs": calibration.runs, "assumptions": calibration.assumptions}
    rows = sweep(plan, cost, sizes, calibration=provenance)
    return {"calibration": provenance, "rows": rows, "largest_class": largest_class(rows, target_p95_s),
            "target_p95_s": target_p95_s, "fits_memory": fits, "memory": memory_detail}


def worker_named(name: str) -> Worker | None:
    return Worker.objects.filter(name=name).first()


def class_plan(*, calibration: Calibration, mix: dict[str, int], workers: int, slots: int | None = None,
               context: int | None = None, cache_type: str | None = None, duration_s: float = 600.0,
               scale: float = 1.0, seed: int = 1, policy: str | None = None, max_wait_s: float | None = None,
               replicates: int = DEFAULT_REPLICATES, lane_workers: int = 0,
               lane_tokens: int = LANE_TOKENS) -> ClassPlan:
    """A class plan on this site's gateway settings (fair policy, maximum wait, lease, affinity,
    slot files, the light lane, the affinity wait, the shared prefix), the calibration's slots and context where not
    given; `lane_workers` of the `workers` kept for prompts of at most `lane_tokens` tokens."""
    fleet = site_fleet(workers=workers, slots=slots or calibration.slots or 1,
                       context_tokens=context or calibration.context or 32768, duration_s=duration_s, policy=policy,
                       max_wait_s=max_wait_s, cache_type=cache_type)
    fleet = dataclasses.replace(fleet, lane_workers=lane_workers, lane_tokens=lane_tokens)
    return ClassPlan(mix=mix, fleet=fleet, seed=seed, scale=scale, replicates=replicates)


def site_fleet(*, workers: int, slots: int, context_tokens: int, duration_s: float, policy: str | None = None,
               max_wait_s: float | None = None, cache_type: str | None = None) -> FleetPlan:
    """A FleetPlan on this site's gateway settings (the fair policy unless `policy`, the maximum
    wait unless `max_wait_s`, lease, affinity, slot files, light lane, affinity wait, shared prefix)."""
    return FleetPlan(
        workers=workers, slots=slots, context_tokens=context_tokens,
        duration_s=duration_s, policy=policy or settings.OCS["FAIR_POLICY"],
        max_wait_s=settings.OCS["QUEUE_MAX_WAIT_S"] if max_wait_s is None else max_wait_s,
        slot_lease_s=settings.OCS["SLOT_LEASE_S"], affinity_ttl_s=settings.OCS["AFFINITY_TTL_S"],
        cache_type=cache_type, slot_files=settings.OCS["SLOT_FILES"],
        light_lane_tokens=settings.OCS["LIGHT_LANE_TOKENS"], affinity_wait_s=settings.OCS["AFFINITY_WAIT_S"],
        local_bound=settings.OCS["LOCAL_BOUND"],
        affinity_wait_tokens=settings.OCS["AFFINITY_WAIT_TOKENS"], shared_prefix_k=settings.OCS["SHARED_PREFIX_K"],
    )


def rig_plan_run(*, models: Sequence[ModelCandidate], rigs: Sequence[Rig], mix: dict[str, int], sizes: Sequence[int],
                 targets: Targets, duration_s: float = 600.0, seed: int = 1, scale: float = 1.0,
                 max_wait_s: float | None = None, measured: Mapping[str, Calibration] | None = None,
                 command: str = "", label: str = "", save: bool = True,
                 progress: Callable[[SearchRow], None] | None = None) -> tuple[dict[str, Any], RigPlan | None]:
    """The rigs search (research/planner/rigs.py) on this site's gateway settings, with the
    calibrations in `measured` (model key: a stored calibration, after a rig day) in place of a
    model's assumed speeds; stored as a RigPlan (the "Plan the rigs" page shows the newest) unless
    `save` is false."""
    fleet = site_fleet(workers=1, slots=1, context_tokens=32768, duration_s=duration_s, max_wait_s=max_wait_s)
    costs = {key: CostModel.from_dict(calibration.cost) for key, calibration in (measured or {}).items()}
    result = rig_search(models=models, rigs=rigs, mix=mix, sizes=sizes, fleet=fleet, targets=targets, seed=seed,
                        scale=scale, measured=costs, progress=progress)
    result["calibrations"] = {key: {"id": c.pk, "label": c.label, "source": c.source}
                              for key, c in (measured or {}).items()}
    result["gateway"] = {"policy": fleet.policy, "max_wait_s": fleet.max_wait_s, "slot_files": fleet.slot_files,
                         "affinity_wait_s": fleet.affinity_wait_s, "light_lane_tokens": fleet.light_lane_tokens}
    stored = None
    if save:
        stored = RigPlan.objects.create(label=label, command=command, result=result,
                                        calibration="measured" if measured else "assumptions")
    return result, stored


def planner_check_record(*, name: str, comparison: Mapping[str, Any], configurations: Sequence[Mapping[str, Any]],
                         noise: Mapping[str, Any] | None = None, title: str = "", finding: str = "",
                         reproduce: str = "", measured_on: datetime.date | None = None,
                         source: str = PlannerCheck.Source.RUN) -> PlannerCheck:
    """Stores one predict-then-measure check (planner_check's `comparison`) as a PlannerCheck and
    its figures, replacing a check of the same name."""
    fields = check_fields({"name": name, "comparison": comparison, "configurations": configurations,
                           "noise": noise or {}, "title": title, "finding": finding, "reproduce": reproduce,
                           "source": source})
    fields.pop("name")
    fields["measured_on"] = measured_on or timezone.localdate()
    with transaction.atomic():
        check, _ = PlannerCheck.objects.update_or_create(name=name, defaults=fields)
        check.figures.all().delete()
        PlannerCheckFigure.objects.bulk_create(PlannerCheckFigure(planner_check=check, **row)
                                               for row in figure_rows(comparison))
    return check
