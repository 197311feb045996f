"""Counting prompt tokens the way the worker does, for the planner's workload (TokenModel).

The simulator needs each prompt segment's tokens. The class replay's text is not what the
bench's filler is (code-like tool results tokenize at ~5 characters a token, prose at ~4), so the
calibration counts the personas' own segments with the worker's tokenizer and chat template:

- per kind of message the worker gets (`system`, `user`, `assistant`, `tool`; the gateway's
  translation of the client's body, workload.worker_messages_of), and for the tool calls an
  assistant message makes (`call`), characters per token: the characters of the texts over the
  tokens the worker counts for each text sent as one user message, less the same message empty
  (an assistant message without the answer it carries: the workload counts that as the tokens
  the slot generated);
- whether the template renders an assistant message's tool calls at all: the same message with
  and without a call (SmolLM2's template drops them, and llama-server turns Anthropic `tool_use`
  blocks into the same calls: counting them counted the coding agents' prompts 6-8 % too long;
  per-persona ratios were tried too, and transferred worse to another seed and scale than these);
- the template's tokens per message: a prompt of two empty user messages less one;
- its tokens once per prompt (BOS, the generation prompt, and a default system prompt where the
  request has none): one empty user message less a message, with and without a system message.

`sample_parts` is the edge (it reads the clients' fixtures through the personas, as the workload
does); `measure_tokens` takes the counter (messages -> tokens) so a test can pass its own; the
command passes one that asks the worker (`/apply-template` then `/tokenize`).
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any, NamedTuple

from research.class_personas import PERSONA_SHAPES
from research.class_replay import student_conversation
from research.planner.cost import TokenModel
from research.planner.workload import (
    CALL,
    KINDS,
    answer_of,
    answer_text,
    message_calls_text,
    message_kind,
    message_text,
    worker_messages_of,
)

Counter = Callable[[list[dict[str, Any]]], int]
SAMPLE_SEED = 7  # not the validation's seed: the counts are of the kinds of text, not of its prompts
# The personas' scale the texts are sampled at. Shorter texts tokenize denser (at 0.03 tool results
# count ~10 % more tokens a character than at 0.1): calibrate_worker --token-scale sets the plan's own.
SAMPLE_SCALE = 0.1
# An assistant message with one tool call, to see whether the template renders calls.
PROBE_CALL: dict[str, Any] = {"id": "call_1", "type": "function",
              "function": {"name": "read_file", "arguments": json.dumps({"path": "src/main.py"})}}


class Part(NamedTuple):
    kind: str
    text: str
    chars: int


def sample_parts(*, seed: int = SAMPLE_SEED, scale: float = SAMPLE_SCALE, turns: int = 6,
                 context_tokens: int = 32768) -> list[Part]:
    """The distinct texts the worker gets in every persona's first `turns` turns
    (workload.worker_messages_of): each message's content, an assistant message's without its
    answer, and its tool calls apart (kind `call`)."""
    seen: set[str] = set()
    out: list[Part] = []
    for number, persona in enumerate(sorted(PERSONA_SHAPES), start=1):
        conversation = student_conversation(seed=seed, name=f"tokens-{persona}", persona=persona, index=number,
                                            scale=scale, tools_inline=True, context_tokens=context_tokens,
                                            model="planned")
        for _ in range(turns):
            _path, body = conversation.request()
            for message in worker_messages_of(body, conversation.persona.dialect):
                text = message_text(message)
                answer = answer_of(message)
                if answer:  # the workload counts an answer as the tokens generated: only the rest here
                    text = text.replace(answer, "", 1)
                for kind, part in ((message_kind(message), text), (CALL, message_calls_text(message))):
                    if part in seen or not part.strip():
                        continue
                    seen.add(part)
                    out.append(Part(kind, part, len(part)))
            conversation.grow(answer_text(conversation.output_tokens))
    return out


def measure_tokens(count: Counter, parts: list[Part]) -> tuple[TokenModel, dict[str, Any]]:
    """The TokenModel from `count` over `parts`, and what it rests on (per kind: segments,
    characters, tokens)."""
    empty = count([{"role": "user", "content": ""}])
    two = count([{"role": "user", "content": ""}, {"role": "user", "content": ""}])
    with_system = count([{"role": "system", "content": ""}, {"role": "user", "content": ""}])
    # the call answered by a tool message: a prompt ending in an assistant message would be one
    # for the model to continue, which llama-server refuses when it holds a call
    plain: list[dict[str, Any]] = [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""},
                                   {"role": "tool", "tool_call_id": PROBE_CALL["id"], "content": "x"}]
    called = [plain[0], {"role": "assistant", "content": "", "tool_calls": [PROBE_CALL]}, plain[2]]
    renders_calls = count(called) > count(plain)
    per_message = max(two - empty, 0)
    chars: dict[str, int] = defaultdict(int)
    tokens: dict[str, int] = defaultdict(int)
    segments: dict[str, int] = defaultdict(int)
    for kind, text, characters in parts:
        chars[kind] += characters
        tokens[kind] += max(count([{"role": "user", "content": text}]) - empty, 1)
        segments[kind] += 1
    model = TokenModel(
        chars_per_token={kind: chars[kind] / tokens[kind] for kind in (*KINDS, CALL) if tokens.get(kind)},
        tokens_per_message=float(per_message),
        head_tokens=float(max(with_system - 2 * per_message, 0)),
        head_tokens_no_system=float(max(empty - per_message, 0)),
        renders_tool_calls=renders_calls,
    )
    basis = {"segments": dict(segments), "characters": dict(chars), "tokens": dict(tokens),
             "empty_prompt_tokens": empty, "two_empty_messages_tokens": two, "with_system_tokens": with_system,
             "renders_tool_calls": renders_calls}
    return model, basis
