"""Q12 of docs/research/questions.md as an Experiment: whether slot files pay on the rigs' risers
(the rig forecast's question, docs/research/rig-forecast.md)."""
from __future__ import annotations

from django.db import migrations

from research.migrations._experiments import seed

QUESTIONS = [
    ("Q12 Slot files on risers",
     "Do slot files (a handover saves the leaving student's prompt, restores the arriving one's) pay on the risers?",
     "Over a Gen1 x1 riser a save holds the worker for seconds and most saved prompts are never restored: "
     "on or off changes little (forecast at an assumed 0.2 GB/s).",
     "A returning agent's 10,000-token prompt restored in seconds instead of recomputed in a minute, but every "
     "save holds the worker's slots while it crosses a x1 link."),
]


class Migration(migrations.Migration):
    dependencies = [("research", "0012_web_baselines")]
    operations = [seed(QUESTIONS)]
