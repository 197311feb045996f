from __future__ import annotations

import json

from inference.reasoning import ReasoningMirror, mirror_reasoning


def test_streamed_reasoning_is_also_sent_the_way_copilot_reads_it() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"reasoning_content": "Let me think"}}]}
    raw = b": keep-alive\n\n" + b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
    whole = b"".join(ReasoningMirror().feed(raw))
    events = whole.split(b"\n\n")
    delta = json.loads(events[1][6:])["choices"][0]["delta"]
    assert delta == {"reasoning_content": "Let me think", "reasoning_text": "Let me think"}
    assert events[0] == b": keep-alive" and events[2] == b"data: [DONE]"
    mirror = ReasoningMirror()
    assert b"".join(b"".join(mirror.feed(raw[i:i + 5])) for i in range(0, len(raw), 5)) == whole


def test_a_whole_answer_gets_reasoning_text_and_plain_answers_are_untouched() -> None:
    data = {"choices": [{"message": {"content": "42", "reasoning_content": "6 times 7"}}]}
    assert mirror_reasoning(data)["choices"][0]["message"]["reasoning_text"] == "6 times 7"
    plain = {"choices": [{"message": {"content": "hi"}}]}
    assert mirror_reasoning(plain) == {"choices": [{"message": {"content": "hi"}}]}
