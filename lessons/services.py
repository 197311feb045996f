"""State changes of the lessons app: verified steps, answers, sightings, manual ticks."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.audit import audit_record
from accounts.models import User
from fleet.models import Worker
from lessons import burndown, evidence, path_lab, roofline_lab
from lessons.syllabus import Question, Step
from lessons.models import (
    Answer,
    AnswerAttempt,
    BurndownSnapshot,
    DeliverableAchieved,
    FleetSighting,
    ManualCheck,
    Ownership,
    PathLab,
    PathVerification,
    RooflineLab,
    Sprint,
    StepDone,
    WorkerPrediction,
)
from lessons.sprint import check_dates
from lessons.ttft_check import MAX_REPORTED_MS, looks_like_request_id
from research.models import WebRun
from research.web_runs import RunAsk, WebRunRefused, web_run_start


class StepInputError(ValueError):
    """Bad input for a step (e.g. a TTFT that is not a number); the message is for the student."""


@dataclass(frozen=True)
class StepResult:
    done: bool
    message: str


def _record(*, user: User, step: Step, found: evidence.Evidence, reported_ttft_ms: float | None = None) -> StepDone:
    try:
        with transaction.atomic():
            return StepDone.objects.create(user=user, step=step.slug, request_log_id=found.request_log_id,
                                           evidence=found.description[:300], reported_ttft_ms=reported_ttft_ms)
    except IntegrityError:  # verified twice at once (two tabs): the first one stands
        return StepDone.objects.get(user=user, step=step.slug)


def step_verify(*, user: User, step: Step, reported_ttft_ms: float | None = None,
                request_id: str = "", explanation: str = "", picked: Sequence[str] = ()) -> StepResult:
    """Look for the step's evidence now; record the step as done when it is there.
    A step already done stays done. `reported_ttft_ms` and `request_id` (the x-request-id the
    gateway returned) are required for the TTFT step."""
    existing = StepDone.objects.filter(user=user, step=step.slug).first()
    if existing is not None:
        return StepResult(True, existing.evidence)
    found: evidence.Evidence | None
    if step.kind == "editor-request":
        found = evidence.editor_request_evidence(user.id)
        missing = evidence.editor_verdict(user.id).reason + " Then check again." if found is None else ""
    elif step.kind == "fleet-watch":
        found = evidence.fleet_watch_evidence(user.id)
        missing = ("The fleet view has not seen one of your requests in flight yet. Keep this page open, send a "
                   "long streaming request, and watch your pool's busy slots.")
    elif step.kind == "ttft-measure":
        if reported_ttft_ms is None:
            raise StepInputError("Enter the TTFT you measured, in milliseconds.")
        if not 0 < reported_ttft_ms <= MAX_REPORTED_MS:
            raise StepInputError(f"A TTFT is a positive number of milliseconds up to {MAX_REPORTED_MS}.")
        request_id = request_id.strip().lower()
        if not looks_like_request_id(request_id):
            raise StepInputError("Enter the request's id: the x-request-id header the gateway returned "
                                 "(32 hexadecimal characters).")
        found, missing = evidence.ttft_evidence(user.id, reported_ttft_ms, request_id)
    elif step.kind == "trace-request":
        request_id = request_id.strip().lower()
        if not looks_like_request_id(request_id):
            raise StepInputError("Enter the request's id: the x-request-id header the gateway returned "
                                 "(32 hexadecimal characters).")
        found, missing = evidence.trace_evidence(user.id, request_id)
    elif step.kind == "predict-worker":
        found, missing = evidence.prediction_evidence(user.id)
    elif step.kind == "every-dialect":
        found, missing = evidence.dialects_evidence(user.id)
    elif step.kind == "roofline-lab":
        found, missing = roofline_check(user=user, explanation=explanation)
    elif step.kind == "path-check":
        found, missing = path_lab_check(user=user, picked=picked, explanation=explanation)
    else:  # the catalogue refuses unknown kinds; this guards a future kind without a rule
        raise StepInputError(f"The site cannot verify steps of kind {step.kind!r}.")
    if found is None:
        return StepResult(False, missing)
    done = _record(user=user, step=step, found=found, reported_ttft_ms=reported_ttft_ms)
    return StepResult(True, done.evidence)


def answer_record(*, user: User, question: Question, choice: int) -> Answer:
    """Save (or replace) a person's answer; raises StepInputError for a choice that does not exist."""
    if not 0 <= choice < len(question.choices):
        raise StepInputError("Pick one of the answers.")
    correct = choice == question.answer
    AnswerAttempt.objects.create(user=user, question=question.id, choice=choice, correct=correct)
    answer, created = Answer.objects.get_or_create(
        user=user, question=question.id, defaults={"choice": choice, "correct": correct, "first_try_correct": correct})
    if not created:
        answer.choice, answer.correct = choice, correct
        answer.answered_at, answer.attempts = timezone.now(), answer.attempts + 1
        answer.save(update_fields=["choice", "correct", "answered_at", "attempts"])
    return answer


SIGHTING_EVERY_S = 60


def fleet_sighting_record(*, user: User, in_flight: int) -> FleetSighting | None:
    """Record that the fleet view saw the person's request(s) in flight; at most one row a minute
    per person (the panel polls every second)."""
    since = timezone.now() - timedelta(seconds=SIGHTING_EVERY_S)
    if FleetSighting.objects.filter(user=user, at__gte=since).exists():
        return None
    return FleetSighting.objects.create(user=user, in_flight=in_flight)


def manual_tick(*, deliverable: str, by: User, note: str = "") -> ManualCheck:
    check, _ = ManualCheck.objects.update_or_create(
        deliverable=deliverable, defaults={"ticked_by": by, "ticked_at": timezone.now(), "note": note[:300]})
    audit_record(actor=by, action="ground0_tick", subject=deliverable, detail=note)
    return check


def manual_untick(*, deliverable: str, by: User) -> None:
    if ManualCheck.objects.filter(deliverable=deliverable).delete()[0]:
        audit_record(actor=by, action="ground0_untick", subject=deliverable)


def burndown_observe(*, rows: list[burndown.Deliverable]) -> list[burndown.Deliverable]:
    """Keep what the burndown just saw: a row seen done for the first time is recorded as achieved
    (with its evidence), and today's snapshot of every row's live state is written (the last look
    of the day wins). Returns the rows with their achievements filled in."""
    today = timezone.localdate()
    kept = []
    for row in rows:
        achieved = row.achieved
        if row.status.state == "done" and achieved is None:
            achieved, _ = DeliverableAchieved.objects.get_or_create(
                deliverable=row.slug, defaults={"evidence": row.status.evidence[:300], "link": row.status.link[:200]})
        BurndownSnapshot.objects.update_or_create(day=today, deliverable=row.slug,
                                                  defaults={"state": row.status.state, "taken_at": timezone.now()})
        kept.append(replace(row, achieved=achieved))
    return kept


def burndown_snapshot() -> int:
    """Evaluate the burndown and keep today's snapshot (django-q2, daily; also on every page view)."""
    return len(burndown_observe(rows=burndown.deliverables()))


def path_verification_record(*, base_url: str, passed: bool, tls_ok: bool, verdict: str) -> PathVerification:
    """Called by `manage.py verify_path` once it has its verdict."""
    return PathVerification.objects.create(base_url=base_url[:255], passed=passed, tls_ok=tls_ok, verdict=verdict[:500])


def owner_set(*, subject: str, owner: str, by: User) -> Ownership | None:
    """Set (or, with an empty `owner`, clear) who owns a burndown row or a research question; audited."""
    owner = owner.strip()[:100]
    if not owner:
        Ownership.objects.filter(subject=subject).delete()
        audit_record(actor=by, action="ground0_owner_clear", subject=subject)
        return None
    row, _ = Ownership.objects.update_or_create(subject=subject, defaults={"owner": owner, "set_by": by,
                                                                          "set_at": timezone.now()})
    audit_record(actor=by, action="ground0_owner_set", subject=subject, detail=owner)
    return row


def sprint_set(*, name: str, starts_on: date, ends_on: date, by: User) -> Sprint:
    """A teacher sets the team's sprint (the burndown then follows it); audited. Raises
    SprintDatesError for dates that make no sprint."""
    check_dates(starts_on, ends_on)
    name = name.strip()[:80] or f"Sprint from {starts_on.isoformat()}"
    sprint = Sprint.objects.create(name=name, starts_on=starts_on, ends_on=ends_on, set_by=by)
    audit_record(actor=by, action="ground0_sprint_set", subject=name,
                 detail=f"{starts_on.isoformat()} to {ends_on.isoformat()}")
    return sprint


def roofline_predict(*, user: User, bandwidth_gbs: float, weights_gb: float, predicted_tok_s: float) -> RooflineLab:
    """Lesson 7: save the student's predicted ceiling (it must follow from their two numbers)."""
    try:
        roofline_lab.check_prediction(bandwidth_gbs=bandwidth_gbs, weights_gb=weights_gb,
                                      predicted_tok_s=predicted_tok_s)
    except roofline_lab.LabInputError as error:
        raise StepInputError(str(error)) from None
    return RooflineLab.objects.create(user=user, bandwidth_gbs=bandwidth_gbs, weights_gb=weights_gb,
                                      predicted_tok_s=predicted_tok_s)


def roofline_measure(*, user: User, gateway_url: str) -> RooflineLab:
    """Lesson 7: start the short measurement for the student's latest prediction: a research web
    run through the gateway as the student's own requests (their key, their limits), one at a time."""
    from research.models import WebRun
    from research.web_runs import RunAsk, WebRunRefused, web_run_start

    lab = RooflineLab.objects.filter(user=user).select_related("web_run").first()
    if lab is None:
        raise StepInputError("Predict the ceiling first, then start the measurement.")
    if lab.web_run is not None and lab.web_run.status in (WebRun.Status.QUEUED, WebRun.Status.RUNNING):
        raise StepInputError("Your measurement is still running: wait for it, then check.")
    worker = Worker.objects.filter(state=Worker.State.HEALTHY,
                                   pool__name=settings.OCS["DEFAULT_POOL"]).order_by("name").first()
    if worker is None:
        raise StepInputError("No worker of your pool is healthy right now: try again later.")
    try:
        web_run = web_run_start(ask=RunAsk(worker_id=worker.pk, via_gateway=True,
                                           prompt_tokens=roofline_lab.LAB_PROMPT_TOKENS,
                                           output_tokens=roofline_lab.LAB_OUTPUT_TOKENS,
                                           requests=roofline_lab.LAB_REQUESTS, concurrency=1,
                                           label=f"roofline lab: {user.username}"),
                                by=user, gateway_url=gateway_url)
    except WebRunRefused as error:
        raise StepInputError(str(error)) from None
    RooflineLab.objects.filter(pk=lab.pk).update(web_run=web_run)
    lab.web_run = web_run
    return lab


def roofline_check(*, user: User, explanation: str) -> tuple[evidence.Evidence | None, str]:
    """The lab is done when the student's prediction has a finished measurement and they explained the gap."""
    lab = RooflineLab.objects.filter(user=user).select_related("web_run__run").first()
    if lab is None:
        return None, "Predict the ceiling first: bandwidth ÷ the bytes of weights read per token."
    run = lab.web_run
    if run is None:
        return None, "Now start the measurement from this step, then check when it has finished."
    if run.status in (WebRun.Status.QUEUED, WebRun.Status.RUNNING):
        return None, f"Your measurement is {run.status} ({run.done_requests} of {run.total_requests} requests)."
    measured = roofline_lab.decode_tok_s(run.run.metric("tpot_ms", "p50") if run.run else None)
    if run.status != WebRun.Status.DONE or measured is None:
        return None, f"The measurement did not finish ({run.error or run.status}): start it again."
    found = roofline_lab.verdict(predicted_tok_s=lab.predicted_tok_s, measured_tok_s=measured)
    try:
        text = roofline_lab.check_explanation(explanation)
    except roofline_lab.LabInputError as error:
        return None, f"{found}. {error}"
    RooflineLab.objects.filter(pk=lab.pk).update(explanation=text)
    return evidence.Evidence(f"{found}; your explanation: {text[:200]}"), ""


def path_lab_check(*, user: User, picked: Sequence[str], explanation: str) -> tuple[evidence.Evidence | None, str]:
    """Lesson 2: done when the student's latest finished path check has their private hops right
    and they said why a worker must refuse a laptop. Every answer is kept on the run's row."""
    lab = PathLab.objects.filter(user=user).first()
    if lab is None:
        return None, "Run the path check first: the site checks every hop of this deployment for you."
    if lab.status in (PathLab.Status.QUEUED, PathLab.Status.RUNNING):
        return None, "Your path check is still running: reload this page in a few seconds, then answer."
    if lab.status != PathLab.Status.DONE:
        return None, f"The path check did not finish ({lab.error or lab.status}): run it again."
    hops = path_lab.hops_asked(lab.results)
    PathLab.objects.filter(pk=lab.pk).update(private_picked=sorted(set(picked))[:20], explanation=explanation[:2000])
    right, said = path_lab.grade(hops, picked)
    if not right:
        return None, said
    try:
        text = path_lab.check_explanation(explanation)
    except path_lab.LabInputError as error:
        return None, f"Right: {said}. {error}"
    counts = path_lab.outcome_counts(lab.results)
    tally = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    return evidence.Evidence(f"verify_path against {lab.base_url} ({tally}); {said}; why a worker refuses a laptop: "
                             f"{text[:150]}"), ""


def worker_predict(*, user: User, worker_name: str) -> WorkerPrediction:
    """Save the student's prediction for lesson 3's step; only a worker that exists may be named."""
    if not Worker.objects.filter(name=worker_name).exclude(state=Worker.State.DISABLED).exists():
        raise StepInputError("Pick one of the workers in the live panel.")
    return WorkerPrediction.objects.create(user=user, worker_name=worker_name)
