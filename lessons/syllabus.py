"""The lessons as the repository describes them: `lessons/content/lessons.toml` (order, titles,
diagrams, live panels, hands-on steps, check questions) and one Markdown file per lesson.
Pure: no Django. Teachers edit these files through git; `load_catalogue()` refuses a file that
does not hold together (unknown step kind, an answer index out of range, a missing file), so a
broken edit fails the tests instead of a page.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CONTENT_DIR = Path(__file__).resolve().parent / "content"
STATIC_DIR = Path(__file__).resolve().parent / "static" / "lessons"

# What the site can verify for a hands-on step (lessons/evidence.py holds one rule per kind).
STEP_KINDS = frozenset({"editor-request", "fleet-watch", "ttft-measure", "trace-request", "every-dialect",
                        "predict-worker", "roofline-lab", "path-check"})
# The live panels the lesson page knows how to fill (lessons/panels.py).
PANELS = frozenset({"installation", "network", "rigs", "fleet", "last-request", "editor", "benchmark"})


class CatalogueError(ValueError):
    """lessons.toml or a lesson file is inconsistent; the message says where."""


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    choices: tuple[str, ...]
    answer: int  # index into choices
    explain: str


@dataclass(frozen=True)
class Step:
    slug: str
    kind: str
    title: str
    how: str


@dataclass(frozen=True)
class Lesson:
    slug: str
    number: int
    title: str
    summary: str
    file: str
    diagram: str
    diagram_alt: str
    panel: str
    steps: tuple[Step, ...]
    questions: tuple[Question, ...]

    def markdown(self) -> str:
        return (CONTENT_DIR / self.file).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Catalogue:
    lessons: tuple[Lesson, ...]

    def lesson(self, slug: str) -> Lesson | None:
        return next((lesson for lesson in self.lessons if lesson.slug == slug), None)

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(step for lesson in self.lessons for step in lesson.steps)

    @property
    def questions(self) -> tuple[Question, ...]:
        return tuple(q for lesson in self.lessons for q in lesson.questions)

    def step(self, slug: str) -> Step | None:
        return next((step for step in self.steps if step.slug == slug), None)

    def question(self, question_id: str) -> Question | None:
        return next((q for q in self.questions if q.id == question_id), None)


def _text(entry: dict[str, object], name: str, where: str) -> str:
    value = entry.get(name)
    if not isinstance(value, str) or not value.strip():
        raise CatalogueError(f"{where}: `{name}` must be a non-empty string")
    return value.strip()


def parse_catalogue(data: dict[str, object], *, content_dir: Path = CONTENT_DIR,
                    static_dir: Path = STATIC_DIR) -> Catalogue:
    """Build and check the catalogue from lessons.toml's data. Raises CatalogueError."""
    entries = data.get("lesson")
    if not isinstance(entries, list) or not entries:
        raise CatalogueError("lessons.toml: no [[lesson]] entries")
    lessons: list[Lesson] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, start=1):
        where = f"lesson {number}"
        slug = _text(entry, "slug", where)
        where = f"lesson `{slug}`"
        file, diagram, panel = _text(entry, "file", where), _text(entry, "diagram", where), _text(entry, "panel", where)
        if not (content_dir / file).is_file():
            raise CatalogueError(f"{where}: lesson file {file} is missing")
        if not (static_dir / diagram).is_file():
            raise CatalogueError(f"{where}: diagram {diagram} is missing")
        if panel not in PANELS:
            raise CatalogueError(f"{where}: unknown panel `{panel}` (known: {', '.join(sorted(PANELS))})")
        steps = []
        for raw in entry.get("step", []):
            step = Step(slug=_text(raw, "slug", where), kind=_text(raw, "kind", where),
                        title=_text(raw, "title", where), how=_text(raw, "how", where))
            if step.kind not in STEP_KINDS:
                raise CatalogueError(f"{where}: step `{step.slug}` has unknown kind `{step.kind}`")
            steps.append(step)
        questions = []
        for raw in entry.get("question", []):
            qid = _text(raw, "id", where)
            choices = raw.get("choices")
            if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
                raise CatalogueError(f"{where}: question `{qid}` needs at least two choices")
            answer = raw.get("answer")
            if not isinstance(answer, int) or not 0 <= answer < len(choices):
                raise CatalogueError(f"{where}: question `{qid}` answer must index its choices (0-based)")
            questions.append(Question(id=qid, text=_text(raw, "text", where), choices=tuple(choices),
                                      answer=answer, explain=_text(raw, "explain", where)))
        if not 2 <= len(questions) <= 3:
            raise CatalogueError(f"{where}: a lesson ends with two or three check questions, not {len(questions)}")
        for name in [slug, *(s.slug for s in steps), *(q.id for q in questions)]:
            if name in seen:
                raise CatalogueError(f"{where}: `{name}` is used twice")
            seen.add(name)
        lessons.append(Lesson(
            slug=slug, number=number, title=_text(entry, "title", where), summary=_text(entry, "summary", where),
            file=file, diagram=diagram, diagram_alt=_text(entry, "diagram_alt", where), panel=panel,
            steps=tuple(steps), questions=tuple(questions),
        ))
    return Catalogue(lessons=tuple(lessons))


@lru_cache(maxsize=1)
def load_catalogue() -> Catalogue:
    """The catalogue from lessons/content/lessons.toml (read once per process)."""
    with open(CONTENT_DIR / "lessons.toml", "rb") as handle:
        return parse_catalogue(tomllib.load(handle))
