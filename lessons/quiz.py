"""Check questions as one student sees them. Pure: no Django.

Each student sees a question's choices in their own order, the same on every visit (seeded by
the student and the question, so a classmate's "it's the second one" does not carry over), and
answers are posted as the catalogue's own index, so the order is display only. The catalogue
also spreads its right answers over the positions (tests/lessons/test_quiz.py keeps it so).
"""
from __future__ import annotations

import hashlib
import random


def choice_order(*, question_id: str, user_id: int | None, choices: int) -> list[int]:
    """The catalogue indexes of a question's choices in the order this student sees them.
    Nobody signed in: the catalogue's order."""
    order = list(range(choices))
    if user_id is None:
        return order
    seed = int.from_bytes(hashlib.sha256(f"{user_id}:{question_id}".encode()).digest()[:8], "big")
    random.Random(seed).shuffle(order)
    return order
