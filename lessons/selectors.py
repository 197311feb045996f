"""Reads of people's progress; every page that shows progress goes through `progress_for`."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta

from django.utils import timezone

from accounts.models import Classroom, User
from accounts.selectors import classes_visible_to, sees_everyone, student_policy
from fleet.models import CatalogModel, Worker
from lessons.syllabus import load_catalogue
from lessons import path_lab as path_lab_rules
from lessons.models import (Answer, AnswerAttempt, BurndownSnapshot, Ownership, PathLab, RooflineLab, Sprint,
                            StepDone)
from lessons.sprint import SprintView, sprint_view
from lessons.progress import Progress, summarise
from research.models import Experiment


def _progress_of(user_ids: list[int]) -> dict[int, Progress]:
    catalogue = load_catalogue()
    steps: dict[int, set[str]] = defaultdict(set)
    for user_id, step in StepDone.objects.filter(user_id__in=user_ids).values_list("user_id", "step"):
        steps[user_id].add(step)
    answers: dict[int, dict[str, int]] = defaultdict(dict)
    for user_id, question, choice in Answer.objects.filter(user_id__in=user_ids).values_list(
            "user_id", "question", "choice"):
        answers[user_id][question] = choice
    return {uid: summarise(catalogue, done_steps=steps[uid], answers=answers[uid]) for uid in user_ids}


def progress_for(user: User) -> Progress:
    return _progress_of([user.id])[user.id]


def done_steps(user: User) -> dict[str, StepDone]:
    return {row.step: row for row in StepDone.objects.filter(user=user)}


def answers_of(user: User) -> dict[str, Answer]:
    return {row.question: row for row in Answer.objects.filter(user=user)}


@dataclass(frozen=True)
class QuizRecord:
    """A person's check-question record: every submitted answer counts as an attempt."""
    answered: int = 0  # questions answered at least once
    attempts: int = 0
    first_try_right: int = 0  # questions whose first attempt was right


def quiz_records(user_ids: list[int]) -> dict[int, QuizRecord]:
    attempts: dict[int, int] = defaultdict(int)
    first: dict[tuple[int, str], bool] = {}
    for user_id, question, correct in AnswerAttempt.objects.filter(user_id__in=user_ids).order_by(
            "at", "id").values_list("user_id", "question", "correct"):
        attempts[user_id] += 1
        first.setdefault((user_id, question), correct)
    # Answers saved before attempts were recorded: one attempt each, first try as stored.
    for user_id, question, correct, tries, first_try in Answer.objects.filter(user_id__in=user_ids).values_list(
            "user_id", "question", "correct", "attempts", "first_try_correct"):
        if (user_id, question) not in first:
            attempts[user_id] += tries
            first[(user_id, question)] = bool(first_try if first_try is not None else (correct and tries == 1))
    return {uid: QuizRecord(answered=sum(1 for (u, _) in first if u == uid), attempts=attempts[uid],
                            first_try_right=sum(1 for (u, _), right in first.items() if u == uid and right))
            for uid in user_ids}


@dataclass(frozen=True)
class ClassRow:
    user: User
    progress: Progress
    quiz: QuizRecord = QuizRecord()


@dataclass(frozen=True)
class ClassProgress:
    classroom: Classroom | None  # None: students in no class
    rows: list[ClassRow]

    @property
    def name(self) -> str:
        return self.classroom.name if self.classroom else "No class"

    @property
    def finished(self) -> int:
        return sum(1 for row in self.rows if row.progress.finished)


def class_progress(classroom: Classroom | None) -> ClassProgress:
    """A class's active students and their progress; replay accounts (class_replay's load) are left out."""
    students = list(User.objects.filter(classroom=classroom, role=User.Role.STUDENT, is_active=True,
                                        is_replay=False).order_by("username"))
    progress = _progress_of([s.id for s in students])
    quiz = quiz_records([s.id for s in students])
    return ClassProgress(classroom, [ClassRow(s, progress[s.id], quiz[s.id]) for s in students])


def all_class_progress(viewer: User) -> list[ClassProgress]:
    """The classes `viewer` teaches, archived ones left out (an admin: every class, and the
    students in no class)."""
    groups = [class_progress(c) for c in classes_visible_to(viewer).filter(is_replay=False, archived_at__isnull=True)
              .order_by("name")]
    unassigned = class_progress(None) if sees_everyone(viewer) else None
    if unassigned is not None and unassigned.rows:
        groups.append(unassigned)
    return groups


def finished_count() -> int:
    """People (students and teachers) who have finished Ground 0; replay accounts are not people."""
    user_ids = list(set(StepDone.objects.filter(user__is_replay=False).values_list("user_id", flat=True)))
    return sum(1 for p in _progress_of(user_ids).values() if p.finished)


@dataclass(frozen=True)
class Cohort:
    """Every active student, split by whether they have finished Ground 0 (by username)."""
    finished: list[User]
    missing: list[User]

    @property
    def total(self) -> int:
        return len(self.finished) + len(self.missing)


def student_cohort() -> Cohort:
    students = list(User.objects.filter(role=User.Role.STUDENT, is_active=True).order_by("username"))
    progress = _progress_of([s.id for s in students])
    return Cohort(finished=[s for s in students if progress[s.id].finished],
                  missing=[s for s in students if not progress[s.id].finished])


def recipe_model(user: User) -> str | None:
    """The model the lessons' recipes name for `user`: the first (by id) that a worker not
    disabled serves and the student may use, as /connect/ picks it; None when there is none."""
    allowed = student_policy(user).allowed_models
    serving = [state for state in Worker.State.values if state != Worker.State.DISABLED]
    ids = (CatalogModel.objects.filter(workers__state__in=serving).order_by("public_id")
           .values_list("public_id", flat=True).distinct())
    return next((model for model in ids if not allowed or model in allowed), None)


@dataclass(frozen=True)
class HistoryDay:
    day: date
    counts: dict[str, int]  # state -> rows in it that day

    def percent(self, state: str) -> float:
        total = sum(self.counts.values())
        return round(100.0 * self.counts.get(state, 0) / total, 1) if total else 0.0


def burndown_history(days: int = 30, *, since: date | None = None, until: date | None = None) -> list[HistoryDay]:
    """The burndown's states per day that has a snapshot, oldest first: from `since` to `until`
    (both included) when given, else the last `days` days."""
    since = since or timezone.localdate() - timedelta(days=days - 1)
    per_day: dict[date, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = BurndownSnapshot.objects.filter(day__gte=since)
    if until is not None:
        rows = rows.filter(day__lte=until)
    for day, state in rows.values_list("day", "state"):
        per_day[day][state] += 1
    return [HistoryDay(day, dict(counts)) for day, counts in sorted(per_day.items())]


def current_sprint() -> Sprint | None:
    """The sprint the burndown follows: the latest one the teacher set."""
    return Sprint.objects.first()


def sprint_history() -> tuple[SprintView | None, list[HistoryDay]]:
    """The burndown's history over the current sprint (the last 30 days when none is set), and
    where today stands in that sprint."""
    sprint = current_sprint()
    if sprint is None:
        return None, burndown_history()
    history = burndown_history(since=sprint.starts_on, until=sprint.ends_on)
    view = sprint_view(name=sprint.name, starts_on=sprint.starts_on, ends_on=sprint.ends_on,
                       today=timezone.localdate(), history=[(h.day, h.counts) for h in history])
    return view, history


@dataclass(frozen=True)
class Question:
    """A research question as numbered in docs/research/questions.md (its seeded Experiment)."""
    number: int
    subject: str  # q1, q2, …: its key in the team split
    title: str
    question: str
    experiment_id: int


def owners() -> dict[str, str]:
    """Subject (burndown slug or q1, q2, …) -> its owner."""
    return dict(Ownership.objects.values_list("subject", "owner"))


def research_questions() -> list[Question]:
    found = []
    for experiment in Experiment.objects.filter(title__regex=r"^Q[0-9]+ "):
        number = int(experiment.title.split()[0][1:])
        found.append(Question(number, f"q{number}", experiment.title, experiment.question, experiment.id))
    return sorted(found, key=lambda q: q.number)


def predictable_workers() -> list[str]:
    """Worker names a student may predict for lesson 3 (every worker not disabled)."""
    return list(Worker.objects.exclude(state=Worker.State.DISABLED).order_by("name").values_list("name", flat=True))


def roofline_lab(user: User) -> RooflineLab | None:
    """The student's latest roofline-lab prediction, with its measurement (lesson 7)."""
    return RooflineLab.objects.filter(user=user).select_related("web_run__run").first()


@dataclass(frozen=True)
class PathLabView:
    lab: PathLab
    hops: list[path_lab_rules.Hop]  # in this student's own order
    open_workers: list[str]  # answered without their key
    rows: list[tuple[str, str, str, str]]  # (what was checked, target, outcome, detail), in the run's order

    @property
    def running(self) -> bool:
        return self.lab.status in (PathLab.Status.QUEUED, PathLab.Status.RUNNING)


def path_lab(user: User) -> PathLabView | None:
    """The student's latest path check (lesson 2), with the hops it asks about in their order."""
    lab = PathLab.objects.filter(user=user).first()
    if lab is None:
        return None
    hops = path_lab_rules.shown_order(path_lab_rules.hops_asked(lab.results), user_id=user.id)
    rows = [(path_lab_rules.HOPS[r["hop"]].label if r.get("hop") in path_lab_rules.HOPS else str(r.get("hop", "")),
             str(r.get("target", "")), str(r.get("outcome", "")), str(r.get("detail", ""))) for r in lab.results]
    return PathLabView(lab=lab, hops=hops, open_workers=path_lab_rules.open_workers(lab.results), rows=rows)
