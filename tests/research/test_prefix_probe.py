"""The prefix probe's control turn (research/prefix_probe.py): the same request, nothing of it public."""
from __future__ import annotations

from inference.admission.shared_prefix import block_names, constant_prefix
from research.prefix_probe import unshared

SECRET = b"s" * 32


def test_the_unshared_turn_differs_from_the_first_character_of_its_system_prompt_and_nowhere_else() -> None:
    chat = {"messages": [{"role": "system", "content": "x" * 5000}, {"role": "user", "content": "task"}],
            "tools": [{"type": "function", "function": {"name": "read"}}]}
    control = unshared(chat, "openai_chat", "n1")
    assert control["messages"][0]["content"] == "Session n1. " + "x" * 5000 and chat["messages"][0]["content"] == "x" * 5000
    assert control["messages"][1:] == chat["messages"][1:] and control["tools"] == chat["tools"]
    named = constant_prefix(chat), constant_prefix(control)
    assert named[0] is not None and named[1] is not None
    assert not set(block_names(named[0].text, SECRET)) & set(block_names(named[1].text, SECRET))  # no block in common
    messages = {"system": [{"type": "text", "text": "You are Claude Code."}], "messages": []}
    assert unshared(messages, "anthropic", "n2")["system"] == [{"type": "text", "text": "Session n2. "},
                                                               {"type": "text", "text": "You are Claude Code."}]
