"""The rest of docs/research/questions.md as Experiments (Q1-Q6 came with 0003), so every
question has one number in the docs, on /research/ and in the lessons."""
from __future__ import annotations

from django.db import migrations

from research.migrations._experiments import seed

QUESTIONS = [
    ("Q7 Steady over weeks", "Does a worker stay as fast over weeks (drivers, thermals, new builds)?",
     "Yes within 10 %; a drop points at a driver, a build or a card running hot.",
     "A quietly slower service."),
    ("Q8 Promotion gate", "Is a new (dev) worker good enough for students?",
     "The SLO gate (TTFT p90, TPOT p90) catches a slow worker before students are moved to it.",
     "Nobody is moved onto a slow worker."),
    ("Q9 Single-stream roofline", "How far is one stream from what the hardware allows?",
     "Decode is already near the bandwidth ceiling (12.5 of 15.8 tok/s); tuning one stream has little left.",
     "Whether tuning one student's stream can still pay."),
    ("Q10 Gateway cost", "What does the gateway itself cost?",
     "A few milliseconds of TTFT and a few percent of throughput at one stream (docs/performance.md).",
     "Every request pays it."),
    ("Q11 Split mode", "Which split mode (layer, row, tensor) for a worker of several GPUs?",
     "Layer split wins on PCIe x1 risers; row and tensor need bandwidth between the cards that risers lack.",
     "The same cards, possibly faster prefill."),
]


class Migration(migrations.Migration):
    dependencies = [("research", "0007_h18replay_run_kind")]
    operations = [seed(QUESTIONS)]
