"""The one way the question migrations (0003, 0008, 0013) seed docs/research/questions.md's questions
as Experiments. A name starting with "_": Django's migration loader skips this module."""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import migrations

Question = tuple[str, str, str, str]  # (title "Qn Short name", question, hypothesis, why it matters)


def create(apps: Any, schema_editor: Any, *, questions: Sequence[Question]) -> None:
    experiment = apps.get_model("research", "Experiment")
    for title, question, hypothesis, why in questions:
        experiment.objects.get_or_create(title=title, defaults={"question": question, "hypothesis": hypothesis,
                                                                "why_it_matters": why})


def remove(apps: Any, schema_editor: Any, *, questions: Sequence[Question]) -> None:
    apps.get_model("research", "Experiment").objects.filter(title__in=[q[0] for q in questions], runs=None).delete()


def seed(questions: Sequence[Question]) -> migrations.RunPython:
    """A RunPython that creates the questions' Experiments (kept where they exist) and, reversed,
    removes those that have no runs. Module-level functions bound with functools.partial, not
    closures, so the operation stays serializable (squashmigrations writes it out)."""
    return migrations.RunPython(partial(create, questions=tuple(questions)),
                                partial(remove, questions=tuple(questions)))
