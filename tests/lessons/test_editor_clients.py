"""The editor step's rule against what the real clients send (tests/fixtures/clients): every
pinned client's request carries an agent's payload by the dialect's own count, a hand-made one
does not, and one request is not a session."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.protocols import anthropic, openai_chat, responses
from lessons.editor_clients import MIN_SYSTEM_CHARS, MIN_TOOLS, Seen, carries_agent_payload, session_turns

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "clients"
PARSERS = {"/v1/messages": anthropic.parse, "/v1/chat/completions": openai_chat.parse,
           "/v1/responses": responses.parse}


def _chat_requests() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(FIXTURES.glob("*.json")):
        for request in json.loads(path.read_text())["requests"]:
            if request["method"] == "POST" and request["path"] in PARSERS:
                found.append((f"{path.stem}{request['path']}", request))
    return found


@pytest.mark.parametrize(("name", "request_"), _chat_requests(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_real_client_request_carries_the_agent_payload(name: str, request_: dict) -> None:
    call = PARSERS[request_["path"]](json.dumps(request_["body"]).encode())
    assert call.shape.tools >= 3 * MIN_TOOLS and call.shape.system_chars >= 3 * MIN_SYSTEM_CHARS, name
    assert call.shape.turns >= 1
    assert carries_agent_payload(tools_n=call.shape.tools, system_chars=call.shape.system_chars)


def test_a_hand_made_request_does_not() -> None:
    body = {"model": "m", "max_tokens": 8, "system": "You are Claude Code.", "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    shape = anthropic.parse(json.dumps(body).encode()).shape
    assert (shape.tools, shape.system_chars, shape.turns) == (0, 20, 1)
    assert not carries_agent_payload(tools_n=shape.tools, system_chars=shape.system_chars)


def test_turns_count_user_messages_and_system_text_counts_every_system_part() -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": "a" * 10},
                                       {"role": "developer", "content": [{"type": "text", "text": "b" * 5}]},
                                       {"role": "user", "content": "1"}, {"role": "assistant", "content": "2"},
                                       {"role": "user", "content": "3"}]}
    shape = openai_chat.parse(json.dumps(body).encode()).shape
    assert (shape.tools, shape.system_chars, shape.turns) == (0, 15, 2)


def _seen(request_id: int, conversation: str = "c", tools_n: int = 17, system_chars: int = 21_000) -> Seen:
    return Seen(request_id=request_id, kind="copilot", conversation=conversation, tools_n=tools_n,
                system_chars=system_chars, turns=1)


def test_a_session_needs_two_agent_requests_of_one_conversation() -> None:
    assert not session_turns([]).passed
    assert not session_turns([_seen(1)]).passed
    assert not session_turns([_seen(2, "a"), _seen(1, "b")]).passed  # two sessions of one request each
    assert not session_turns([_seen(2, tools_n=0), _seen(1, tools_n=0)]).passed  # a header and nothing else
    verdict = session_turns([_seen(3, "a"), _seen(2, "b"), _seen(1, "a")])
    assert verdict.passed and verdict.request_id == 3 and verdict.requests == 2
