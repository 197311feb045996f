"""Does a llama-server build hand one conversation's prompt to another? Pure, no I/O.

llama.cpp issue #27148 (open): with the host-RAM prompt cache (`--cache-ram`, on by default at
8,192 MiB) and `--cache-idle-slots` (on by default), a slot taking a new, unrelated request can be
given the state of an earlier, finished conversation, and the model continues that conversation
instead of answering; the response's `cached_tokens` reads 0. Its reproduction: seed the server
with a few conversations carrying marker strings, then send rounds of two concurrent, unrelated
requests (both slots change hands at once) and look for a marker in the answers. Every request
here starts with the same system prompt, as a class's do (one client's instructions and tools),
so a seeded conversation is the RAM cache's best match for a question: what makes it restore one.

`manage.py prompt_cache_probe` does that against the pinned build, once with llama-server's own
defaults and once with the flags the platform launches workers with (fleet.local_worker.
ISOLATION_ARGS), same requests, greedy decoding. Two signs, counted separately:

- **a marker** from a seeded conversation in an answer to an unrelated question: that
  conversation's text reached the request (the issue's sign);
- **an answer that differs** from the same question's answer on a clean server (one slot, no
  RAM cache, nothing else sent). Greedy decoding of one prompt is the same every time unless
  the state it attends to differs; a batch of another shape can also move a near-tie, so a
  difference alone is a hint, and the two variants' counts side by side say which it is.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

WORDS = ("KESTREL", "OBSIDIAN", "MARLIN", "QUASAR", "TUNDRA", "ZEPHYR", "CINNABAR", "HALCYON",
         "JUNIPER", "VERMILION", "PEREGRINE", "SAFFRON", "ARGONAUT", "BASALT", "NIMBUS", "ORCHID")

QUESTIONS = (
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about rain.",
    "List three primary colours.",
    "How many legs does a spider have?",
    "Explain in one sentence what a compiler does.",
    "Name a fruit that is yellow.",
    "What is 12 plus 30?",
    "Give one tip for sleeping well.",
    "Translate 'good morning' into Spanish.",
    "What do bees make?",
    "Describe the sea in five words.",
    "Which planet is closest to the sun?",
)


SYSTEM = (
    "You are a careful coding assistant for students in a school computer lab. Answer the question "
    "that is asked, briefly and correctly. Prefer short answers. If code is needed, give a small, "
    "complete example. Never invent facts; say when you do not know. Be kind and encouraging. "
    "Follow the school's rules: no personal data, no answers to graded tests, no harmful content. "
    "When a question is unclear, ask one short question back. Use plain words a beginner understands."
)


def markers(count: int, seed: int = 0) -> list[str]:
    """`count` distinct marker strings (a rare word and four digits: KESTREL-4817)."""
    if count > len(WORDS):
        raise ValueError(f"at most {len(WORDS)} markers")
    rng = random.Random(seed)
    return [f"{word}-{rng.randrange(1000, 10000)}" for word in rng.sample(WORDS, count)]


def seed_messages(marker: str, repeats: int = 40) -> list[dict[str, str]]:
    """A conversation full of `marker` after the shared system prompt: whatever continues it says
    the marker."""
    filler = " ".join([marker] * repeats)
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Remember this code word: {marker}. Repeat it many times. {filler}"},
        {"role": "assistant", "content": filler},
        {"role": "user", "content": f"Again, only the code word {marker}, over and over."},
    ]


def question_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def markers_in(text: str, known: Iterable[str]) -> list[str]:
    """The markers of `known` whose word appears in `text` (case-insensitive): the word alone is
    rare enough to be the sign, and a model often drops or changes the digits."""
    upper = text.upper()
    return [marker for marker in known if marker.split("-", 1)[0] in upper]


@dataclass(frozen=True)
class ProbeAnswer:
    """One unrelated question under load: its answer, what a clean server answered, and the
    response's cached token count."""

    round: int
    question: str
    answer: str
    baseline: str
    cached_tokens: int | None = None
    error: str = ""

    def found(self, known: Sequence[str]) -> list[str]:
        return markers_in(self.answer, known)

    @property
    def differs(self) -> bool:
        return not self.error and self.answer != self.baseline


@dataclass
class VariantResult:
    """What one server configuration did with the same seeds and rounds."""

    name: str
    flags: list[str]
    markers: list[str]
    answers: list[ProbeAnswer] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        hits = [a for a in self.answers if a.found(self.markers)]
        rounds_hit = {a.round for a in hits}
        return {
            "variant": self.name,
            "flags": self.flags,
            "rounds": len({a.round for a in self.answers}),
            "answers": len(self.answers),
            "errors": sum(1 for a in self.answers if a.error),
            "answers_with_a_marker": len(hits),
            "rounds_with_a_marker": len(rounds_hit),
            "answers_differing_from_clean": sum(1 for a in self.answers if a.differs),
            "cached_tokens_of_marked_answers": [a.cached_tokens for a in hits],
            "examples": [{"round": a.round, "question": a.question, "answer": a.answer[:200],
                          "markers": a.found(self.markers), "cached_tokens": a.cached_tokens}
                         for a in hits[:5]],
            "differing_examples": [{"round": a.round, "question": a.question, "answer": a.answer[:200],
                                    "clean": a.baseline[:200], "cached_tokens": a.cached_tokens}
                                   for a in self.answers if a.differs][:5],
        }


def verdict(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per variant: reproduced (a marker reached an unrelated answer) or not."""
    lines = []
    for name, s in summaries.items():
        if s["answers_with_a_marker"]:
            lines.append(f"{name}: reproduced: a seeded conversation's marker in {s['answers_with_a_marker']} of "
                         f"{s['answers']} unrelated answers ({s['rounds_with_a_marker']} of {s['rounds']} rounds)")
        else:
            lines.append(f"{name}: not reproduced: no marker in {s['answers']} unrelated answers "
                         f"({s['rounds']} rounds); {s['answers_differing_from_clean']} differ from a clean server's")
    return "\n".join(lines)
