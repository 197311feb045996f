"""What "finished Ground 0" means, in one place. Pure: no Django.

A person has finished Ground 0 when every hands-on step of every lesson is done (verified
from evidence, lessons/evidence.py) and every check question's latest answer is right.
The student's progress page, the teacher's class table, its CSV export and the burndown all
call `summarise()`, so they cannot disagree.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lessons.syllabus import Catalogue, Lesson

FINISHED_RULE = ("every hands-on step done (checked against the system's own records) and every check "
                 "question answered correctly")


@dataclass(frozen=True)
class LessonProgress:
    lesson: Lesson
    steps_done: int
    steps_total: int
    correct: int
    questions_total: int

    @property
    def complete(self) -> bool:
        return self.steps_done == self.steps_total and self.correct == self.questions_total


@dataclass(frozen=True)
class Progress:
    lessons: tuple[LessonProgress, ...]

    @property
    def finished(self) -> bool:
        return all(lesson.complete for lesson in self.lessons)

    @property
    def lessons_complete(self) -> int:
        return sum(1 for lesson in self.lessons if lesson.complete)

    @property
    def steps_done(self) -> int:
        return sum(lesson.steps_done for lesson in self.lessons)

    @property
    def steps_total(self) -> int:
        return sum(lesson.steps_total for lesson in self.lessons)

    @property
    def correct(self) -> int:
        return sum(lesson.correct for lesson in self.lessons)

    @property
    def questions_total(self) -> int:
        return sum(lesson.questions_total for lesson in self.lessons)


def summarise(catalogue: Catalogue, *, done_steps: Iterable[str], answers: Mapping[str, int]) -> Progress:
    """`done_steps`: slugs of verified steps; `answers`: question id -> chosen index (latest)."""
    done = set(done_steps)
    rows = []
    for lesson in catalogue.lessons:
        rows.append(LessonProgress(
            lesson=lesson,
            steps_done=sum(1 for step in lesson.steps if step.slug in done),
            steps_total=len(lesson.steps),
            correct=sum(1 for q in lesson.questions if answers.get(q.id) == q.answer),
            questions_total=len(lesson.questions),
        ))
    return Progress(lessons=tuple(rows))
