"""The simulator's students: the class replay's own personas, conversations, seeds and pauses.

Each simulated student is the replay's: the same roster names (`replay-agent-01`, ...), the same
conversation (research.class_replay.student_conversation: the same seed gives the same tasks,
tool results and think times), the same arrival (`arrival_offsets`) and the same reaction to an
answer or a refusal (`pause_after_turn`). What the simulator cannot have is the model's answer:
a turn's answer is taken to fill its output cap (`max_tokens`), as text of that many tokens.

Prompt sizes: with the calibration's TokenModel (counted by the worker's own tokenizer and
template, `calibrate_worker --count-tokens`), a body is first translated as the gateway sends it
to the worker (inference.protocols: called, not copied), and each worker message is a segment
of a kind (`system`, `user`, `assistant`, `tool`: a tool's result) of
`ceil(characters of its text / characters per token of its kind) + tokens per message` tokens,
after a head segment of the tokens the template adds once (BOS, the generation prompt, a default
system prompt where the request has none); a message is keyed by its role and text, as
llama-server matches tokens. Without a TokenModel, the old fixed guess: each part of the client's
body (message, system block, input item), every string in it (ids and types too) at 4 characters
a token plus 4 a message. That guess counted the validation's agent prompts 15-20 % too big
(docs/research/planner-validation.md).

With a TokenModel, an assistant message's answer is a segment of its own of the turn's output
tokens (what the slot generated, found cached when it comes back), keyed as the previous
TurnShape's `answer_key`; the rest of the message (a tool call) is another.

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

from inference.admission import shared_prefix
from fleet.scheduler import conversation_key
from inference.protocols import anthropic as anthropic_protocol
from inference.protocols import responses as responses_protocol
from research.class_personas import FIXTURES, PERSONA_SHAPES, Conversation, roster
from research.class_replay import arrival_offsets, arrival_spread_s, pause_after_turn, student_conversation
from research.planner.cost import DEFAULT_CHARS_PER_TOKEN, DEFAULT_TOKENS_PER_MESSAGE, TokenModel
from research.planner.sim import TurnShape

CHARS_PER_TOKEN = DEFAULT_CHARS_PER_TOKEN
TOKENS_PER_MESSAGE = DEFAULT_TOKENS_PER_MESSAGE  # the chat template's role markers around each message
KINDS = ("system", "user", "assistant", "tool")
CALL = "call"  # a tool call an assistant message makes (OpenAI `tool_calls`, Anthropic `tool_use`): its own kind


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


def worker_messages_of(body: dict[str, Any], dialect: str) -> list[dict[str, Any]]:
    """The chat messages the gateway sends the worker for `body`: the gateway's own translations
    (inference.protocols), called, not copied. Anthropic messages keep their blocks."""
    if dialect == "anthropic":
        system, messages = anthropic_protocol.worker_messages(body)
        return [*([{"role": "system", "content": system}] if system else []), *messages]
    if dialect == "responses":
        return responses_protocol.to_chat_messages(body.get("input"), body.get("instructions"))
    return list(body.get("messages") or [])


def _blocks_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    texts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_result":
            texts.append(_blocks_text(block.get("content")))
    return "".join(texts)


def message_text(message: dict[str, Any]) -> str:
    """The text of a worker message's content (its tool calls apart: message_calls_text)."""
    return _blocks_text(message.get("content"))


def message_calls_text(message: dict[str, Any]) -> str:
    """The text of the tool calls a worker message makes: OpenAI `tool_calls` (name and arguments)
    and Anthropic `tool_use` blocks (name and input), which llama-server takes as tool calls too.
    Whether the chat template renders them at all is the TokenModel's `renders_tool_calls`
    (SmolLM2's does not: the calls are not in the prompt the worker computes)."""
    calls = [str(call.get("function", {}).get("name") or "") + str(call.get("function", {}).get("arguments") or "")
             for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    content = message.get("content")
    if isinstance(content, list):
        calls += [str(block.get("name") or "") + json.dumps(block.get("input") or {})
                  for block in content if isinstance(block, dict) and block.get("type") == "tool_use"]
    return "".join(calls)


def message_kind(message: dict[str, Any]) -> str:
    role = message.get("role") or "user"
    content = message.get("content")
    if role == "user" and isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content):
        return "tool"
    if role in ("system", "developer"):
        return "system"
    return role if role in KINDS else "user"


def answer_of(message: dict[str, Any]) -> str:
    """The answer text an assistant message carries ("" if none)."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text") or "") for block in content
                       if isinstance(block, dict) and block.get("type") in ("text", "output_text"))
    return ""


def answer_key(answer: str) -> str:
    return "answer:" + hashlib.sha1(answer.encode()).hexdigest()[:16]


def text_tokens(chars: int, kind: str, tokens: TokenModel | None) -> int:
    per = tokens.chars_per_token_of(kind) if tokens else CHARS_PER_TOKEN
    return math.ceil(chars / per)


def message_tokens(tokens: TokenModel | None) -> int:
    return round(tokens.tokens_per_message) if tokens else TOKENS_PER_MESSAGE


def segment(part: Any, kind: str = "user", tokens: TokenModel | None = None) -> tuple[str, int]:
    """A prompt part's cache segment (key, tokens), its characters counted the old way (every
    string in it): for a TokenModel-less plan, which keeps the fixed guess."""
    text = json.dumps(part, sort_keys=True, default=str)
    count = text_tokens(_text_chars(part), kind, tokens) + message_tokens(tokens)
    return hashlib.sha1(text.encode()).hexdigest()[:16], count


def segments_of(body: dict[str, Any], dialect: str, *, tokens: TokenModel | None = None,
                answer_tokens: int = 0) -> tuple[tuple[str, int], ...]:
    """A body's prompt as cache segments (module docstring). With a TokenModel, one segment per
    message the worker gets (the gateway's translation), of its text's tokens at its kind's
    characters per token, and of its tool calls' if the template renders them;
    without, one per part of the client's body, every string in it at 4 characters a token (the
    old guess). `answer_tokens`: the tokens of the answer an assistant message carries back (the
    turn's output cap); 0 counts its text."""
    if tokens is None:
        return tuple(segment(part) for part in prompt_parts(body, dialect))
    messages = worker_messages_of(body, dialect)
    out: list[tuple[str, int]] = []
    head = tokens.head_tokens if any(message_kind(m) == "system" for m in messages) else tokens.head_tokens_no_system
    if round(head) > 0:
        out.append(("head", round(head)))
    for message in messages:
        kind = message_kind(message)
        text = message_text(message)
        calls = message_calls_text(message) if tokens.renders_tool_calls else ""
        # keyed by what the template renders (role, text, calls if rendered), as llama-server matches
        # tokens: a client's markers that do not render (Anthropic's cache_control) do not break the match
        key = hashlib.sha1(f"{message.get('role')}\n{text}\n{calls}".encode()).hexdigest()[:16]
        answer = answer_of(message) if answer_tokens else ""
        rest = (text_tokens(max(len(text) - len(answer), 0), kind, tokens)
                + (text_tokens(len(calls), CALL, tokens) if calls else 0) + message_tokens(tokens))
        out += [(answer_key(answer), answer_tokens), ("rest:" + key, rest)] if answer else [(key, rest)]
    return tuple(out)


def segment_chars(body: dict[str, Any], dialect: str, *, tokens: TokenModel | None = None,
                  answer_tokens: int = 0) -> list[int]:
    """The characters of text behind each of segments_of's segments, in its order (0: the head)."""
    if tokens is None:
        return [_text_chars(part) for part in prompt_parts(body, dialect)]
    messages = worker_messages_of(body, dialect)
    head = tokens.head_tokens if any(message_kind(m) == "system" for m in messages) else tokens.head_tokens_no_system
    out = [0] if round(head) > 0 else []
    for message in messages:
        text = message_text(message)
        answer = answer_of(message) if answer_tokens else ""
        out += [len(answer), max(len(text) - len(answer), 0)] if answer else [len(text)]
    return out


SHARED_SECRET = b"planner"  # block names are only compared within one simulation


def shared_blocks(body: dict[str, Any], dialect: str, segments: tuple[tuple[str, int], ...], chars: list[int]
                  ) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """TurnShape.shared: per whole block of the leading system message the gateway sends the worker
    (inference/admission/shared_prefix.py), its name and the segments a slot primed up to its end holds: the
    segments its text covers, the last one in part (its tokens in proportion to its characters)."""
    leading = shared_prefix.leading_message({"messages": worker_messages_of(body, dialect)})
    names = shared_prefix.block_names(leading[1], SHARED_SECRET) if leading else []
    if len(names) < shared_prefix.MIN_PUBLIC_BLOCKS:
        return ()
    out = []
    for number, name in enumerate(names, start=1):
        left, held = number * shared_prefix.BLOCK_CHARS, []
        for (key, count), size in zip(segments, chars):
            if key == "head" or 0 < size <= left:
                held.append((key, count))
                left -= 0 if key == "head" else size
                continue
            if left > 0:
                held.append((key, max(1, count * left // size)))
            break
        out.append((name, tuple(held)))
    return tuple(out)


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
    tokens: TokenModel | None = None
    shares: bool = False  # the plan shares system prompts (FleetPlan.shared_prefix_k): name their blocks

    def next_turn(self) -> TurnShape:
        _path, body = self.conversation.request()
        opening = [self.name, self.conversation.tasks]
        output = self.conversation.output_tokens
        dialect = self.conversation.persona.dialect
        segments = segments_of(body, dialect, tokens=self.tokens, answer_tokens=output)
        shared = (shared_blocks(body, dialect, segments,
                                segment_chars(body, dialect, tokens=self.tokens, answer_tokens=output))
                  if self.shares else ())
        return TurnShape(segments=segments, shared=shared,
                         prompt_bytes=len(json.dumps(body).encode()),
                         output_tokens=output,
                         conversation=conversation_key(user_id=self.index, model_id=self.conversation.model,
                                                       messages=opening),
                         answer_key=answer_key(answer_text(output)))

    def turn_ended(self, *, completed: bool, retry_after_s: float) -> float:
        return pause_after_turn(self.conversation, completed=completed,
                                answer=answer_text(self.conversation.output_tokens), retry_after_s=retry_after_s)


def class_students(*, mix: dict[str, int], seed: int, scale: float, context_tokens: int, duration_s: float,
                   tools_inline: bool = True, model: str = "planned", fixtures_dir: Path = FIXTURES,
                   arrivals_s: float | None = None, tokens: TokenModel | None = None,
                   shares: bool = False) -> list[PersonaStudent]:
    """The replay's class for `mix`, as the replay would build it with the same flags (`shares`:
    their turns name their system prompts' blocks, for a plan that shares them)."""
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
                                       arrival_s=offset, tokens=tokens, shares=shares))
    return students
