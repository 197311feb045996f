"""Server-sent events: the one splitter, and rewriting an OpenAI-style stream chunk by chunk.
Pure: no Django.

Reads arrive in arbitrary pieces; events are separated by a blank line (`\n\n`, or `\r\n\r\n`
from a server that ends lines the HTTP way). Each `data: {json}` event
is parsed and handed to `rewrite`; everything else (comments, `data: [DONE]`) passes through.
Only streams that need it are rewritten (forced tool calls, reasoning models): the common path
forwards the worker's bytes untouched.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from inference.protocols.base import StreamTransform


def sse_events(pending: bytes, raw: bytes) -> tuple[list[bytes], bytes]:
    """Split a byte stream into whole SSE events (without their blank-line terminator).
    Returns (events, what is left for the next read). Accepts \\r\\n line ends."""
    pending += raw
    if b"\r\n" in pending:
        pending = pending.replace(b"\r\n", b"\n")
    events = []
    while b"\n\n" in pending:
        event, pending = pending.split(b"\n\n", 1)
        events.append(event)
    return events, pending


class SseRewriter(StreamTransform):
    def __init__(self) -> None:
        self._pending = b""

    def feed(self, raw: bytes) -> Iterator[bytes]:
        events, self._pending = sse_events(self._pending, raw)
        for event in events:
            if not event.startswith(b"data: {"):
                yield event + b"\n\n"
                continue
            try:
                chunk = json.loads(event[6:])
            except ValueError:
                yield event + b"\n\n"
                continue
            yield b"data: " + json.dumps(self.rewrite(chunk)).encode() + b"\n\n"

    def rewrite(self, chunk: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError
