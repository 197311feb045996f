"""Reasoning models: llama-server sends the model's thinking as `reasoning_content`; Copilot
reads `reasoning_text`. For models the catalogue marks as reasoning, both are sent. Pure."""
from __future__ import annotations

from typing import Any

from inference.sse import SseRewriter


def _mirror(part: dict[str, Any]) -> None:
    if part.get("reasoning_content") and "reasoning_text" not in part:
        part["reasoning_text"] = part["reasoning_content"]


class ReasoningMirror(SseRewriter):
    def rewrite(self, chunk: dict[str, Any]) -> dict[str, Any]:
        for choice in chunk.get("choices") or []:
            _mirror(choice.get("delta") or {})
        return chunk


def mirror_reasoning(data: dict[str, Any]) -> dict[str, Any]:
    for choice in data.get("choices") or []:
        _mirror(choice.get("message") or {})
    return data
