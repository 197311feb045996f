"""Facts the lessons and docs must keep straight, and one numbering of the research questions."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(settings.BASE_DIR)
LESSONS = ROOT / "lessons" / "content"


def _all_text() -> str:
    paths = [*LESSONS.glob("*.md"), LESSONS / "lessons.toml", ROOT / "docs" / "research" / "rig-baseline.md",
             ROOT / "docs" / "ground0.md", ROOT / "docs" / "capstone.md"]
    return "\n".join(path.read_text(encoding="utf-8") for path in paths)


def test_no_seven_copies_of_a_model_that_does_not_fit_a_card() -> None:
    text = _all_text()
    assert "aggregate if 7 GPUs each ran their own stream" not in text
    assert "≈ 110 tok/s if all" not in text
    assert "**Batched slots**" in (LESSONS / "07-measurement.md").read_text() and "own cards" in text


def test_lesson_7_covers_the_split_modes_and_what_decides_between_them() -> None:
    text = (LESSONS / "07-measurement.md").read_text()
    for needed in ("**layer**", "**row**", "**tensor**", "flash attention", "NCCL", "-sm layer,row,tensor"):
        assert needed in text, needed
    assert "16.5 GB" in text and "16.2 GB" in text and "read per token" in text


def test_editors_lesson_names_the_byok_policy_and_no_longer_promises_every_vs_code() -> None:
    text = (LESSONS / "06-editors.md").read_text()
    assert "Works in every VS Code" not in text and "Business or Enterprise" in text


def test_netbird_and_rigs_lessons_cover_the_policy_and_proxmox() -> None:
    assert "access policy" in (LESSONS / "02-netbird.md").read_text().lower()
    rigs = (LESSONS / "03-rigs-and-workers.md").read_text()
    assert "passthrough" in rigs and "vfio-pci" in rigs and "CUDA_VISIBLE_DEVICES" in rigs


def _numbered(path: Path) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| (Q\d+) \| ([^|]+)\|", path.read_text(), re.M)}


def test_one_numbering_of_the_research_questions() -> None:
    questions = _numbered(ROOT / "docs" / "research" / "questions.md")
    capstone = _numbered(ROOT / "docs" / "capstone.md")
    assert list(questions) == [f"Q{n}" for n in range(1, len(questions) + 1)]
    assert set(capstone) == set(questions)
    seeded: list[tuple[str, str, str, str]] = []
    for name in ("0003_questions", "0008_h23_questions_q7_q11", "0013_questions_q12"):
        seeded += importlib.import_module(f"research.migrations.{name}").QUESTIONS
    assert [title.split()[0] for title, *_ in seeded] == list(questions)
    for title, question, *_ in seeded:
        number = title.split()[0]
        assert questions[number].replace("`", "") == question, number  # the seed asks what the docs ask
    for number, text in capstone.items():  # the capstone's wording may be shorter, not another question
        assert set(re.findall(r"[a-z]{5,}", text.lower())) & set(re.findall(r"[a-z]{5,}", questions[number].lower())), number


@pytest.mark.django_db
def test_the_start_page_says_what_to_read_and_what_finished_means(client) -> None:  # noqa: ANN001
    page = client.get("/lessons/start/").content.decode()
    assert "Start here" in page and "/lessons/summary/" in page and "finished Ground 0" in page
    assert "/lessons/start/" in client.get("/lessons/").content.decode()


def test_the_lessons_teach_the_default_queue_and_the_server_that_runs() -> None:
    """The default fair policy is token-fair (inference/admission/fair_share.py DEFAULT_POLICY), not round-robin;
    the API runs on the lean path under uvicorn, not daphne/Django."""
    from inference.admission.fair_share import DEFAULT_POLICY

    assert DEFAULT_POLICY == "tokens"
    texts = {path.name: path.read_text(encoding="utf-8") for path in [
        ROOT / "docs" / "ground0.md", LESSONS / "lessons.toml",
        ROOT / "lessons" / "static" / "lessons" / "scheduling.svg",
        ROOT / "lessons" / "static" / "lessons" / "control-plane.svg"]}
    for name, text in texts.items():
        assert "wait round-robin" not in text and "round-robin queue" not in text, name
        assert "round-robin per student" not in text, name
        assert "daphne" not in text, name
