"""The one SSE splitter, as every stream rewriter sees it."""
from __future__ import annotations

import json
from typing import Any

from inference.sse import SseRewriter, sse_events


class Upper(SseRewriter):
    def rewrite(self, chunk: dict[str, Any]) -> dict[str, Any]:
        return {**chunk, "text": chunk["text"].upper()}


def test_events_split_on_blank_lines_of_either_line_end_and_across_reads() -> None:
    stream = b'data: {"n": 1}\r\n\r\ndata: {"n": 2}\n\n: keep-alive\r\n\r\ndata: [DONE]\r\n\r\n'
    events, pending = [], b""
    for i in range(len(stream)):  # one byte per read: every split point, "\r" and "\n" apart too
        got, pending = sse_events(pending, stream[i:i + 1])
        events += got
    assert events == [b'data: {"n": 1}', b'data: {"n": 2}', b": keep-alive", b"data: [DONE]"]
    assert pending == b""


def test_a_rewriter_rewrites_crlf_events_too() -> None:
    rewriter = Upper()
    out = b"".join(rewriter.feed(b'data: {"text": "hi"}\r\n\r\ndata: [DONE]\r\n\r\n'))
    first, done = out.split(b"\n\n")[:2]
    assert json.loads(first[6:]) == {"text": "HI"}
    assert done == b"data: [DONE]"
