"""The simulator's students: the class replay's own personas, conversations, seeds and pauses.

Each simulated student is the replay's: the same roster names (`replay-agent-01`, ...), the same
conversation (research.class_replay.student_conversation: the same seed gives the same tasks,
tool results and think times), the same arrival (`arrival_offsets`) and the same reaction to an
answer or a refusal (`pause_after_turn`). What the simulator cannot have is the model's answer:
a turn's answer is taken to fill its output cap (`max_tokens`), as text of that many tokens.

Prompt sizes: a body's prompt is cut into segments (each message, system block or input item),
each `ceil(characters of its text / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE` tokens. Checked against
the demo worker's tokenizer (docs/research/class-replay.md, scale 1 first turns): agent 11,850 vs
11,866 measured, claude 18,978 vs 20,337 (-7 %), codex 9,620 vs 8,830 (+9 %), chat 41 vs 40,
burst 492 vs 377 (+30 %: code-like filler tokenizes at ~5 characters a token).

This module reads the clients' captured requests (tests/fixtures/clients/) through the personas:
the simulator's core (sim.py) does no I/O, this is its edge.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.scheduler import conversation_key
from research.class_personas import FIXTURES, PERSONA_SHAPES, Conversation, roster
from research.class_replay import arrival_offsets, arrival_spread_s, pause_after_turn, student_conversation
from research.planner.sim import TurnShape

CHARS_PER_TOKEN = 4.0
TOKENS_PER_MESSAGE = 4  # the chat template's role markers around each message


def _text_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_text_chars(item) for item in value)
    if isinstance(value, dict):
        return sum(_text_chars(item) for item in value.values())
    return 0 if value is None else len(str(value))


def prompt_parts(body: dict[str, Any], dialect: str) -> list[Any]:
    """The prompt-bearing parts of a body, in the order the chat template renders them (tool
    definitions are left out: the replay writes them into the system prompt as text)."""
    if dialect == "anthropic":
        system = body.get("system")
        blocks = system if isinstance(system, list) else ([system] if system else [])
        return [*blocks, *(body.get("messages") or [])]
    if dialect == "responses":
        return [*([body["instructions"]] if body.get("instructions") else []), *(body.get("input") or [])]
    return list(body.get("messages") or [])


def segment(part: Any) -> tuple[str, int]:
    text = json.dumps(part, sort_keys=True, default=str)
    tokens = math.ceil(_text_chars(part) / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE
    return hashlib.sha1(text.encode()).hexdigest()[:16], tokens


def answer_text(output_tokens: int) -> str:
    """Text of about `output_tokens` tokens (the answer grown into the next prompt)."""
    words = max(1, output_tokens)
    return " ".join(["tok"] * words)[: max(1, int(words * CHARS_PER_TOKEN))]


@dataclass
class PersonaStudent:
    """A replay student for the simulator (research.planner.sim.Student)."""

    name: str
    persona: str
    index: int
    conversation: Conversation
    arrival_s: float
    weight: float = 1.0

    def next_turn(self) -> TurnShape:
        _path, body = self.conversation.request()
        parts = prompt_parts(body, self.conversation.persona.dialect)
        opening = [self.name, self.conversation.tasks]
        return TurnShape(segments=tuple(segment(part) for part in parts),
                         prompt_bytes=len(json.dumps(body).encode()),
                         output_tokens=self.conversation.output_tokens,
                         conversation=conversation_key(user_id=self.index, model_id=self.conversation.model,
                                                       messages=opening))

    def turn_ended(self, *, completed: bool, retry_after_s: float) -> float:
        return pause_after_turn(self.conversation, completed=completed,
                                answer=answer_text(self.conversation.output_tokens), retry_after_s=retry_after_s)


def class_students(*, mix: dict[str, int], seed: int, scale: float, context_tokens: int, duration_s: float,
                   tools_inline: bool = True, model: str = "planned", fixtures_dir: Path = FIXTURES,
                   arrivals_s: float | None = None) -> list[PersonaStudent]:
    """The replay's class for `mix`, as the replay would build it with the same flags."""
    names = roster(mix)
    offsets = arrival_offsets(seed=seed, students=len(names), spread_s=arrival_spread_s(duration_s, arrivals_s))
    students = []
    for number, ((name, persona), offset) in enumerate(zip(names, offsets), start=1):
        if persona not in PERSONA_SHAPES:
            raise ValueError(f"unknown persona {persona!r}")
        conversation = student_conversation(seed=seed, name=name, persona=persona, index=number, scale=scale,
                                            tools_inline=tools_inline, context_tokens=context_tokens, model=model,
                                            fixtures_dir=fixtures_dir)
        students.append(PersonaStudent(name=name, persona=persona, index=number, conversation=conversation,
                                       arrival_s=offset))
    return students
