"""Pages of Ground 0: the lessons, their steps and questions, progress, the teacher's table and
the burndown. Thin: parse, call a service or selector, render."""
from __future__ import annotations

import csv
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.messages import get_messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from accounts.access import staff_required
from accounts.models import User
from accounts.selectors import classes_visible_to, sees_everyone
from lessons import burndown, panels, path_runs, selectors, services
from lessons.syllabus import Lesson, Step, load_catalogue
from lessons.progress import FINISHED_RULE
from lessons.quiz import choice_order
from lessons.recipes import KEY_PLACEHOLDER, fill_recipes
from lessons.day_input import parse_day
from lessons.sprint import SprintDatesError
from lessons.render import render_markdown

View = Callable[..., HttpResponse]


def _csv_cell(value: str) -> str:
    """A spreadsheet must not run a name as a formula (=, +, -, @ at the start)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@") else value


def _lesson_or_404(slug: str) -> Lesson:
    lesson = load_catalogue().lesson(slug)
    if lesson is None:
        raise Http404("No such lesson.")
    return lesson


def _viewer(request: HttpRequest) -> User | None:
    return request.user if isinstance(request.user, User) and request.user.is_authenticated else None


@require_GET
def lesson_index(request: HttpRequest) -> HttpResponse:
    viewer = _viewer(request)
    progress = selectors.progress_for(viewer) if viewer else None
    return render(request, "lessons/index.html", {
        "lessons": load_catalogue().lessons, "progress": progress, "finished_rule": FINISHED_RULE})


def _panel(lesson: Lesson, viewer: User | None) -> dict[str, Any]:
    if lesson.panel == "installation":
        return panels.installation()
    if lesson.panel == "network":
        return panels.network() if viewer else {}
    if lesson.panel == "rigs":
        return {"rigs": panels.rigs()} if viewer else {}
    if lesson.panel == "fleet":
        return {"fleet": panels.fleet(viewer)} if viewer else {}
    if lesson.panel == "last-request":
        return {"request": panels.last_request(viewer.id) if viewer else None,
                "routes": panels.installation()["routes"]}
    if lesson.panel == "editor":
        return panels.editor_panel(viewer.id) if viewer else {}
    if lesson.panel == "benchmark":
        return panels.benchmark_panel(viewer.id if viewer else None)
    return {}


def _step_tag(step: Step) -> str:
    """A message about one step is shown in that step (where the Check's redirect lands), not at
    the top of the page, thousands of pixels above on a phone."""
    return f"step-{step.slug}"


def _tell(request: HttpRequest, step: Step, level: int, text: str) -> None:
    messages.add_message(request, level, text, extra_tags=_step_tag(step))


@require_GET
def lesson_detail(request: HttpRequest, slug: str) -> HttpResponse:
    lesson = _lesson_or_404(slug)
    notes = list(get_messages(request))
    step_notes = {note.extra_tags: note for note in notes if note.extra_tags.startswith("step-")}
    viewer = _viewer(request)
    catalogue = load_catalogue()
    done = selectors.done_steps(viewer) if viewer else {}
    answers = selectors.answers_of(viewer) if viewer else {}
    position = catalogue.lessons.index(lesson)
    return render(request, "lessons/lesson.html", {
        "lesson": lesson,
        # Recipes with this site's address (as the browser reached it) and the viewer's model, as /connect/.
        "body": fill_recipes(render_markdown(lesson.markdown()), site=request.build_absolute_uri("/"),
                             model=selectors.recipe_model(viewer) if viewer else None),
        "key_placeholder": KEY_PLACEHOLDER,
        "panel": _panel(lesson, viewer),
        "steps": [(step, done.get(step.slug), step_notes.get(_step_tag(step))) for step in lesson.steps],
        # The page's own messages: those about a step are shown in it.
        "messages": [note for note in notes if not note.extra_tags.startswith("step-")],
        "predictable": selectors.predictable_workers() if viewer and any(
            s.kind == "predict-worker" for s in lesson.steps) else [],
        "roofline": selectors.roofline_lab(viewer) if viewer and any(
            s.kind == "roofline-lab" for s in lesson.steps) else None,
        "path_lab": selectors.path_lab(viewer) if viewer and any(
            s.kind == "path-check" for s in lesson.steps) else None,
        # Right or wrong by the catalogue's answer now (the same rule as progress.summarise).
        # Choices in this student's own order (lessons/quiz.py); the form posts the catalogue's index.
        "questions": [(q, answers.get(q.id), q.id in answers and answers[q.id].choice == q.answer,
                       [(i, q.choices[i]) for i in choice_order(question_id=q.id, user_id=viewer.id if viewer else None,
                                                                choices=len(q.choices))])
                      for q in lesson.questions],
        "previous": catalogue.lessons[position - 1] if position > 0 else None,
        "next": catalogue.lessons[position + 1] if position + 1 < len(catalogue.lessons) else None,
    })


@login_required
@require_POST
def step_check(request: HttpRequest, slug: str, step_slug: str) -> HttpResponse:
    lesson = _lesson_or_404(slug)
    step = next((s for s in lesson.steps if s.slug == step_slug), None)
    if step is None:
        raise Http404("No such step.")
    reported: float | None = None
    raw = request.POST.get("ttft_ms", "").strip()
    assert isinstance(request.user, User)
    if step.kind == "predict-worker" and request.POST.get("action") == "predict":
        try:
            services.worker_predict(user=request.user, worker_name=request.POST.get("worker", "")[:100])
        except services.StepInputError as error:
            _tell(request, step, messages.ERROR, str(error))
        else:
            _tell(request, step, messages.INFO, "Prediction saved. Now send one request with your key, then press Check.")
        return HttpResponseRedirect(f"/lessons/{lesson.slug}/#step-{step.slug}")
    if step.kind == "roofline-lab" and request.POST.get("action") in ("predict", "measure"):
        return _roofline_action(request, lesson, step)
    if step.kind == "path-check" and request.POST.get("action") == "run":
        try:
            path_runs.path_lab_start(user=request.user, base_url=settings.OCS_RUNS_BASE_URL)
        except path_runs.PathLabRefused as error:
            _tell(request, step, messages.ERROR, str(error))
        else:
            _tell(request, step, messages.INFO, "Path check started: it takes a few seconds. Reload this page to see its checks.")
        return HttpResponseRedirect(f"/lessons/{lesson.slug}/#step-{step.slug}")
    try:
        if raw:
            try:
                reported = float(raw)
            except ValueError:
                raise services.StepInputError("Enter the TTFT as a number of milliseconds, e.g. 420.") from None
        result = services.step_verify(user=request.user, step=step, reported_ttft_ms=reported,
                                      request_id=request.POST.get("request_id", "")[:64],
                                      explanation=request.POST.get("explanation", "")[:2000],
                                      picked=[hop[:40] for hop in request.POST.getlist("private_hop")[:20]])
    except services.StepInputError as error:
        _tell(request, step, messages.ERROR, str(error))
    else:
        _tell(request, step, messages.SUCCESS if result.done else messages.WARNING,
              ("Done: " if result.done else "Not yet: ") + result.message)
    return HttpResponseRedirect(f"/lessons/{lesson.slug}/#step-{step.slug}")


def _roofline_action(request: HttpRequest, lesson: Lesson, step: Step) -> HttpResponse:
    """Lesson 7's lab: save a predicted ceiling, or start the short measurement."""
    assert isinstance(request.user, User)
    try:
        if request.POST.get("action") == "predict":
            try:
                numbers = {name: float(request.POST.get(name, "")) for name in
                           ("bandwidth_gbs", "weights_gb", "predicted_tok_s")}
            except ValueError:
                raise services.StepInputError("Give the bandwidth, the weights' size and your ceiling as numbers, "
                                              "e.g. 256, 16.2 and 15.8.") from None
            services.roofline_predict(user=request.user, **numbers)
            _tell(request, step, messages.INFO, "Prediction saved. Now start the measurement.")
        else:
            services.roofline_measure(user=request.user, gateway_url=settings.OCS_RUNS_BASE_URL)
            _tell(request, step, messages.INFO, "Measurement started: it takes a minute or so. Check when it has finished.")
    except services.StepInputError as error:
        _tell(request, step, messages.ERROR, str(error))
    return HttpResponseRedirect(f"/lessons/{lesson.slug}/#step-{step.slug}")


@login_required
@require_POST
def answer(request: HttpRequest, slug: str, question_id: str) -> HttpResponse:
    lesson = _lesson_or_404(slug)
    question = next((q for q in lesson.questions if q.id == question_id), None)
    if question is None:
        raise Http404("No such question.")
    assert isinstance(request.user, User)
    try:
        choice = int(request.POST.get("choice", ""))
        services.answer_record(user=request.user, question=question, choice=choice)
    except (ValueError, services.StepInputError):
        messages.error(request, "Pick one of the answers.")
    return HttpResponseRedirect(f"/lessons/{lesson.slug}/#question-{question.id}")


@require_GET
def fleet_json(request: HttpRequest) -> HttpResponse:
    """The scheduling lesson's live fleet panel, polled every second. Records a sighting (the
    evidence for "watch your request") when the viewer has a request in flight."""
    viewer = _viewer(request)
    if viewer is None:
        return JsonResponse({"error": "Sign in to see the live fleet."}, status=401)
    view = panels.fleet(viewer)
    if view.mine_in_flight:
        services.fleet_sighting_record(user=viewer, in_flight=view.mine_in_flight)
    return JsonResponse(view.as_json())


@login_required
@require_GET
def progress_page(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    return render(request, "lessons/progress.html", {
        "progress": selectors.progress_for(request.user), "done": selectors.done_steps(request.user),
        "finished_rule": FINISHED_RULE})


def _teacher(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # staff_required ran first
    return user


@staff_required
@require_GET
def teacher_page(request: HttpRequest) -> HttpResponse:
    return render(request, "lessons/teacher.html", {
        "groups": selectors.all_class_progress(_teacher(request)), "lessons": load_catalogue().lessons,
        "finished_rule": FINISHED_RULE})


@staff_required
@require_GET
def teacher_csv(request: HttpRequest) -> HttpResponse:
    """?class=<id> for one class, ?class=none for students in no class, nothing for all."""
    wanted = request.GET.get("class", "")
    viewer = _teacher(request)
    if wanted == "none" and sees_everyone(viewer):
        groups = [selectors.class_progress(None)]
    elif wanted:
        classroom = classes_visible_to(viewer).filter(id=int(wanted)).first() if wanted.isdigit() else None
        if classroom is None:
            raise Http404("No such class.")
        groups = [selectors.class_progress(classroom)]
    else:
        groups = selectors.all_class_progress(viewer)
    lessons = load_catalogue().lessons
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="ground0-progress.csv"'
    writer = csv.writer(response)
    writer.writerow(["class", "username", "name", "finished_ground0", "lessons_complete", "steps_done",
                     "steps_total", "questions_correct", "questions_total", "answer_attempts", "right_first_try",
                     "questions_answered",
                     *[f"lesson:{lesson.slug}" for lesson in lessons]])
    for group in groups:
        for row in group.rows:
            p = row.progress
            writer.writerow([_csv_cell(group.name), _csv_cell(row.user.username), _csv_cell(row.user.get_full_name()), "yes" if p.finished else "no",
                             p.lessons_complete, p.steps_done, p.steps_total, p.correct, p.questions_total,
                             row.quiz.attempts, row.quiz.first_try_right, row.quiz.answered,
                             *["complete" if lp.complete else f"{lp.steps_done}/{lp.steps_total} steps, "
                               f"{lp.correct}/{lp.questions_total} right" for lp in p.lessons]])
    return response


@require_GET
def start_page(request: HttpRequest) -> HttpResponse:
    """docs/start-here.md: what to read, in what order, for someone who joins late."""
    text = burndown.START_PATH.read_text(encoding="utf-8") if burndown.START_PATH.is_file() else \
        "The start page (docs/start-here.md) is missing from this installation."
    return render(request, "lessons/summary.html", {"body": render_markdown(text), "title": "Start here",
                                                    "source": "docs/start-here.md"})


@require_GET
def summary_page(request: HttpRequest) -> HttpResponse:
    text = burndown.SUMMARY_PATH.read_text(encoding="utf-8") if burndown.SUMMARY_PATH.is_file() else \
        "The summary (docs/ground0.md) is missing from this installation."
    return render(request, "lessons/summary.html", {"body": render_markdown(text)})


@login_required
@require_GET
def ground0_page(request: HttpRequest) -> HttpResponse:
    rows = services.burndown_observe(rows=burndown.deliverables())  # achievements and today's snapshot
    counts = {state: sum(1 for r in rows if r.status.state == state) for state in burndown.STATES}
    sprint, history = selectors.sprint_history()
    return render(request, "lessons/ground0.html", {
        "deliverables": rows, "counts": counts, "cohort": selectors.student_cohort(),
        "achieved": sum(1 for r in rows if r.achieved), "history": history, "sprint": sprint,
        "owners": selectors.owners(), "questions": selectors.research_questions(),
        "states": burndown.STATES, "finished_rule": FINISHED_RULE})


@staff_required
@require_POST
def ground0_tick(request: HttpRequest, deliverable: str) -> HttpResponse:
    if deliverable not in burndown.MANUAL_SLUGS:
        raise Http404("Only manual checks can be ticked.")
    assert isinstance(request.user, User)
    if request.POST.get("action") == "untick":
        services.manual_untick(deliverable=deliverable, by=request.user)
    else:
        services.manual_tick(deliverable=deliverable, by=request.user, note=request.POST.get("note", "").strip())
    return HttpResponseRedirect(f"/ground0/#deliverable-{deliverable}")


@staff_required
@require_POST
def ground0_sprint(request: HttpRequest) -> HttpResponse:
    """The team's sprint dates: the burndown's history follows the latest sprint set."""
    assert isinstance(request.user, User)
    try:
        starts_on = parse_day(request.POST.get("starts_on", ""))
        ends_on = parse_day(request.POST.get("ends_on", ""))
        services.sprint_set(name=request.POST.get("name", ""), starts_on=starts_on, ends_on=ends_on,
                            by=request.user)
    except SprintDatesError as exc:
        messages.error(request, str(exc))
    except ValueError:
        messages.error(request, "Give the sprint's first and last day as dates, e.g. 5 Dec 2026.")
    return HttpResponseRedirect("/ground0/#burndown-history")


@staff_required
@require_POST
def ground0_owner(request: HttpRequest) -> HttpResponse:
    """The team split: who owns a burndown row or a research question (an empty owner clears it)."""
    subject = request.POST.get("subject", "")
    known = {slug for slug, *_ in burndown.DERIVED} | burndown.MANUAL_SLUGS | {
        q.subject for q in selectors.research_questions()}
    if subject not in known:
        raise Http404("No such deliverable or question.")
    assert isinstance(request.user, User)
    services.owner_set(subject=subject, owner=request.POST.get("owner", ""), by=request.user)
    anchor = f"question-{subject}" if subject.startswith("q") and subject[1:].isdigit() else f"deliverable-{subject}"
    return HttpResponseRedirect(f"/ground0/#{anchor}")
