"""Prompt tokens as the worker counts them: the TokenModel measured from a counter, and the
workload's segments from it (the gateway's translation, the answer as the tokens generated)."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from research.planner.cost import CostModel, TokenModel
from research.planner.sim import FleetPlan, simulate
from research.planner.tokens import Part, measure_tokens, sample_parts
from research.planner.workload import answer_key, answer_text, class_students, segments_of, worker_messages_of

TOKENS = TokenModel(chars_per_token={"system": 4.0, "user": 4.0, "assistant": 2.0, "tool": 5.0, "call": 2.0},
                    tokens_per_message=5, head_tokens=4, head_tokens_no_system=25)


def fake_count(messages: list[dict[str, Any]], *, calls: bool = False) -> int:
    """A template of 5 tokens a message, 3 once, a 21-token default system prompt when there is no
    system message; text that starts with TOOL at 5 characters a token, other text at 4; with
    `calls`, 7 tokens for each tool call (else, like SmolLM2's, none)."""
    head = 3 + (0 if any(m["role"] == "system" for m in messages) else 21 + 5)
    return head + sum(5 + math.ceil(len(m["content"]) / (5 if m["content"].startswith("TOOL") else 4))
                      + (7 * len(m.get("tool_calls") or []) if calls else 0)
                      for m in messages)


def test_measure_tokens_recovers_a_known_tokenizer_and_template() -> None:
    parts = [Part("tool", "TOOL" + "x" * 496, 500), Part("user", "u" * 400, 400), Part("system", "s" * 800, 800)]
    model, basis = measure_tokens(fake_count, parts)
    assert model.tokens_per_message == 5
    assert model.head_tokens == 3
    assert model.head_tokens_no_system == 3 + 21 + 5
    assert model.chars_per_token == {"tool": 5.0, "user": 4.0, "system": 4.0}
    assert basis["segments"] == {"tool": 1, "user": 1, "system": 1}
    assert model.renders_tool_calls is False and basis["renders_tool_calls"] is False
    assert measure_tokens(lambda m: fake_count(m, calls=True), parts)[0].renders_tool_calls is True


def test_the_sample_is_of_every_persona_and_leaves_the_answers_out_and_the_calls_apart() -> None:
    parts = sample_parts(turns=3)
    assert {"system", "user", "tool", "call"} <= {part.kind for part in parts}
    filler = answer_text(8)
    assert not any(filler in part.text for part in parts)
    assert all(part.chars == len(part.text) for part in parts)
    calls = [part.text for part in parts if part.kind == "call"]
    assert calls and not any(call in part.text for call in calls for part in parts if part.kind != "call")


def test_segments_count_each_worker_message_by_its_kind_after_the_templates_head() -> None:
    body = {"messages": [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "u" * 40},
                         {"role": "assistant", "content": "tok tok", "tool_calls": [
                             {"id": "1", "type": "function", "function": {"name": "read", "arguments": "{}" * 5}}]},
                         {"role": "tool", "tool_call_id": "1", "content": "t" * 100}]}
    segments = segments_of(body, "openai_chat", tokens=TOKENS, answer_tokens=9)
    assert [tokens for _, tokens in segments] == [4, 100 + 5, 10 + 5, 9, math.ceil(14 / 2) + 5, 20 + 5]
    assert segments[3][0] == answer_key("tok tok")
    # a template that drops tool calls (SmolLM2's): the call is not in the prompt, nor in the key
    dropped = segments_of(body, "openai_chat", tokens=dataclasses.replace(TOKENS, renders_tool_calls=False),
                          answer_tokens=9)
    assert [tokens for _, tokens in dropped] == [4, 100 + 5, 10 + 5, 9, 5, 20 + 5]
    no_call = {"messages": [*body["messages"][:2], {"role": "assistant", "content": "tok tok"}, body["messages"][3]]}
    assert segments_of(no_call, "openai_chat", tokens=dataclasses.replace(TOKENS, renders_tool_calls=False),
                       answer_tokens=9) == dropped
    no_system = segments_of({"messages": [{"role": "user", "content": "u" * 40}]}, "openai_chat", tokens=TOKENS)
    assert no_system[0] == ("head", 25)


def test_the_gateways_translation_is_what_gets_counted() -> None:
    body = {"instructions": "i" * 80, "input": [
        {"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": "u" * 40}]}]}
    assert worker_messages_of(body, "responses") == [{"role": "system", "content": "i" * 80},
                                                     {"role": "user", "content": "u" * 40}]
    # the item's id and type are not text the worker reads
    assert [t for _, t in segments_of(body, "responses", tokens=TOKENS)] == [4, 20 + 5, 10 + 5]


def test_a_students_next_turn_finds_its_previous_answer_cached_in_its_slot() -> None:
    cost = CostModel(prefill_s_per_token=0.001, decode_s_per_token=0.001, tokens=TOKENS)
    (chat,) = class_students(mix={"chat": 1}, seed=1, scale=0.03, context_tokens=4096, duration_s=60, tokens=TOKENS)
    turns, _ = simulate(plan=FleetPlan(workers=1, slots=1, context_tokens=4096, duration_s=60), costs=[cost],
                        students=[chat])
    first, second = turns[0], turns[1]
    output = chat.conversation.output_tokens
    # the second prompt: the first one, the answer (as generated, but its last token: the worker
    # never evaluates the token it sampled last), a new question
    assert second.reused_prompt_tokens == first.prompt_tokens + output - 1
    assert second.prompt_tokens - second.reused_prompt_tokens == pytest.approx(
        TOKENS.tokens_per_message + 15, abs=15)


def test_without_a_token_model_the_old_guess_stands() -> None:
    (agent,) = class_students(mix={"agent": 1}, seed=1, scale=0.03, context_tokens=4096, duration_s=60)
    shape = agent.next_turn()
    assert shape.segments[0][0] != "head"
    assert shape.answer_key == answer_key(answer_text(agent.conversation.output_tokens))


def test_an_anthropic_tool_use_block_is_a_call_too() -> None:
    """llama-server turns a tool_use block into a tool call, which the template may drop."""
    def body(blocks: list[dict[str, Any]]) -> dict[str, Any]:
        return {"system": "s" * 40, "messages": [{"role": "user", "content": "u" * 40},
                                                 {"role": "assistant", "content": blocks},
                                                 {"role": "user", "content": "next"}]}
    use = {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.py"}}
    text = {"type": "text", "text": "ok"}
    dropped = dataclasses.replace(TOKENS, renders_tool_calls=False)
    assert segments_of(body([text, use]), "anthropic", tokens=dropped) == segments_of(body([text]), "anthropic",
                                                                                        tokens=dropped)
    rendered = [t for _, t in segments_of(body([text, use]), "anthropic", tokens=TOKENS)]
    assert rendered[3] == math.ceil(2 / 2) + math.ceil(len('read{"path": "a.py"}') / 2) + 5


def test_a_token_model_measured_before_calls_were_a_kind_counts_them_as_it_measured_them() -> None:
    old = TokenModel.from_dict({"chars_per_token": {"user": 4.0, "assistant": 2.0}, "tokens_per_message": 5})
    assert old.renders_tool_calls is True
    assert old.chars_per_token_of("call") == 2.0  # measured inside "assistant" then
    assert TokenModel(chars_per_token={"user": 4.0}).chars_per_token_of("call") == 4.0
