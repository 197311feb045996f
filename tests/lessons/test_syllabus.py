"""The lesson files hold together, and a broken edit is refused with a message saying where."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lessons.syllabus import STATIC_DIR, CatalogueError, load_catalogue, parse_catalogue

SVG = "{http://www.w3.org/2000/svg}"


def test_the_seven_topics_of_the_issue_are_lessons_each_with_two_or_three_questions() -> None:
    catalogue = load_catalogue()
    slugs = [lesson.slug for lesson in catalogue.lessons]
    assert slugs == ["control-plane", "netbird", "rigs-and-workers", "scheduling", "api", "editors", "measurement"]
    for lesson in catalogue.lessons:
        assert 2 <= len(lesson.questions) <= 3
        assert lesson.markdown().strip()
        assert lesson.steps, f"lesson {lesson.slug} has no hands-on step"
    assert {step.kind for step in catalogue.steps} == {"editor-request", "fleet-watch", "ttft-measure", "trace-request",
                                                       "every-dialect", "predict-worker", "roofline-lab", "path-check"}


@pytest.mark.parametrize("lesson", load_catalogue().lessons, ids=lambda lesson: lesson.slug)
def test_every_diagram_is_an_accessible_svg(lesson) -> None:  # noqa: ANN001
    root = ET.parse(STATIC_DIR / lesson.diagram).getroot()
    assert root.tag == SVG + "svg" and root.get("role") == "img"
    title, desc = root.find(SVG + "title"), root.find(SVG + "desc")
    assert title is not None and title.text and desc is not None and desc.text and len(desc.text) > 80
    assert root.get("aria-labelledby") == f"{title.get('id')} {desc.get('id')}"
    assert root.find(f".//{SVG}script") is None


def _entry(tmp_path: Path, **overrides: object) -> dict[str, object]:
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "a.svg").write_text("<svg/>")
    entry: dict[str, object] = {
        "slug": "a", "title": "A", "summary": "s", "file": "a.md", "diagram": "a.svg", "diagram_alt": "alt",
        "panel": "fleet",
        "question": [{"id": "q1", "text": "?", "choices": ["x", "y"], "answer": 1, "explain": "e"},
                     {"id": "q2", "text": "?", "choices": ["x", "y"], "answer": 0, "explain": "e"}],
    }
    entry.update(overrides)
    return {"lesson": [entry]}


def test_a_consistent_entry_parses(tmp_path: Path) -> None:
    catalogue = parse_catalogue(_entry(tmp_path), content_dir=tmp_path, static_dir=tmp_path)
    assert catalogue.question("q1").answer == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"question": [{"id": "q1", "text": "?", "choices": ["x", "y"], "answer": 2, "explain": "e"},
                   {"id": "q2", "text": "?", "choices": ["x", "y"], "answer": 0, "explain": "e"}]}, "answer must index"),
    ({"question": [{"id": "q1", "text": "?", "choices": ["x", "y"], "answer": 0, "explain": "e"}]}, "two or three"),
    ({"step": [{"slug": "s", "kind": "vibes", "title": "t", "how": "h"}]}, "unknown kind"),
    ({"panel": "weather"}, "unknown panel"),
    ({"file": "missing.md"}, "missing"),
])
def test_a_broken_edit_is_refused_saying_where(tmp_path: Path, overrides: dict[str, object], message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        parse_catalogue(_entry(tmp_path, **overrides), content_dir=tmp_path, static_dir=tmp_path)
