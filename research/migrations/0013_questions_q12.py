"""Q12 of docs/research/questions.md as an Experiment: whether slot files pay on the rigs' risers
(the rig forecast's question, docs/research/rig-forecast.md)."""
from __future__ import annotations

from typing import Any

from django.db import migrations

QUESTIONS = [
    ("Q12 Slot files on risers",
     "Do slot files (a handover saves the leaving student's prompt, restores the arriving one's) pay on the risers?",
     "Over a Gen1 x1 riser a save holds the worker for seconds and most saved prompts are never restored: "
     "on or off changes little (forecast at an assumed 0.2 GB/s).",
     "A returning agent's 10,000-token prompt restored in seconds instead of recomputed in a minute, but every "
     "save holds the worker's slots while it crosses a x1 link."),
]


def create(apps: Any, schema_editor: Any) -> None:
    experiment = apps.get_model("research", "Experiment")
    for title, question, hypothesis, why in QUESTIONS:
        experiment.objects.get_or_create(title=title, defaults={"question": question, "hypothesis": hypothesis,
                                                                "why_it_matters": why})


def remove(apps: Any, schema_editor: Any) -> None:
    apps.get_model("research", "Experiment").objects.filter(title__in=[q[0] for q in QUESTIONS], runs=None).delete()


class Migration(migrations.Migration):
    dependencies = [("research", "0012_web_baselines")]
    operations = [migrations.RunPython(create, remove)]
