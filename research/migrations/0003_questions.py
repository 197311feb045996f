"""The team's first research questions (docs/research/questions.md) as Experiments, so the
research pages start with them; runs get attached with `bench --experiment ID`."""
from __future__ import annotations

from django.db import migrations

from research.migrations._experiments import seed

QUESTIONS = [
    ("Q1 Prompt-eval anomaly", "Is the 1.8 s prompt eval of a 20-token prompt a cold start, a CPU fallback, or the risers?",
     "Mostly a cold start: warm prompt eval will be several times faster.",
     "The wait before the first word is what students notice most."),
    ("Q2 Two workers of 4 GPUs", "Do two workers of 4 GPUs serve more students than one of 7, at the same speed each?",
     "Same per-stream tokens/s, about twice the aggregate (layer split is a pipeline).",
     "Twice the students at once with no one slower."),
    ("Q3 Slots per worker", "How many slots (-np) per worker before each student gets too slow?",
     "On GPUs, 4 slots raise output tokens/s ~2-3x with TPOT p90 still within the SLO.",
     "More students served at once, each still fast enough."),
    ("Q4 Speculative decoding", "Does speculative decoding speed up one student's stream?",
     "A same-vocabulary draft model gives +30 % or more at high acceptance; little with full slots.",
     "Faster single answers, the common case in a lesson."),
    ("Q5 Prefix reuse", "Does keeping a conversation on the worker that holds it in cache cut the second turn's TTFT?",
     "Yes, by an order of magnitude for long conversations.", "Follow-up questions answered faster."),
    ("Q6 Long context", "What does long context (YaRN past the native context) cost?",
     "TTFT grows with prompt length; YaRN costs nothing extra at the same length.",
     "Coding tools send 8-16K-token prompts."),
]


class Migration(migrations.Migration):
    dependencies = [("research", "0002_schedules")]
    operations = [seed(QUESTIONS)]
