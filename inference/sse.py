"""Rewriting an OpenAI-style SSE stream chunk by chunk. Pure: no Django.

Reads arrive in arbitrary pieces; events are separated by a blank line. Each `data: {json}` event
is parsed and handed to `rewrite`; everything else (comments, `data: [DONE]`) passes through.
Only streams that need it are rewritten (forced tool calls, reasoning models): the common path
forwards the worker's bytes untouched.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from inference.protocols.base import StreamTransform


class SseRewriter(StreamTransform):
    def __init__(self) -> None:
        self._pending = b""

    def feed(self, raw: bytes) -> Iterator[bytes]:
        self._pending += raw
        while b"\n\n" in self._pending:
            event, self._pending = self._pending.split(b"\n\n", 1)
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
