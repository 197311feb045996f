"""Token counts of an answer, from whichever place the worker reports them. Pure: no Django.

- OpenAI JSON or stream chunk: `usage` {prompt_tokens, completion_tokens}; llama-server also puts
  `timings` {prompt_n, cache_n, predicted_n} in every answer's final chunk, even when the client
  did not ask for usage;
- Anthropic: `usage` {input_tokens, output_tokens, cache_read_input_tokens,
  cache_creation_input_tokens} in the message (or in message_start / message_delta events); the
  prompt is all three input counts, since input_tokens leaves out what came from the cache.
A stream's counts come in its last chunk: a stream cut short (the client left, the worker died)
never gets them. So the sniffer also counts the content events it sees (`relayed_tokens`: the
worker streams one token per event), which is what such a stream is charged and logged for
(RequestContext.estimate_unreported_usage).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# One worker event that carries a token of the answer: text, reasoning or a tool call's arguments
# (llama-server's OpenAI chat and completions streams), not the empty role or finish events.
CONTENT_EVENT = re.compile(rb'^data: ?\{[^\n]*?"(?:content|reasoning_content|text|arguments)": ?"(?!")', re.MULTILINE)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    prompt_per_second: float | None = None
    predicted_per_second: float | None = None
    relayed_tokens: int = 0  # content events passed on to the client (streams only)
    estimated: bool = False  # the worker never reported: the counts are the gateway's estimate

    @property
    def reported(self) -> bool:
        return self.prompt_tokens > 0 or self.completion_tokens > 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def absorb(self, data: dict[str, Any]) -> None:
        usage = data.get("usage") or (data.get("message") or {}).get("usage") or {}
        timings = data.get("timings") or {}
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        anthropic_cached = usage.get("cache_read_input_tokens")
        if "input_tokens" in usage and "prompt_tokens" not in usage and isinstance(prompt, int):
            # Anthropic counts prompt tokens read from the cache apart from input_tokens.
            extra = [usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")]
            prompt += sum(n for n in extra if isinstance(n, int) and n > 0)
        if prompt is None and timings:
            prompt = timings.get("prompt_n", 0) + timings.get("cache_n", 0)
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        if completion is None and timings:
            completion = timings.get("predicted_n")
        if isinstance(prompt, int) and prompt > 0:
            self.prompt_tokens = prompt
        if isinstance(completion, int) and completion > 0:
            self.completion_tokens = completion
        cached = timings.get("cache_n", (usage.get("prompt_tokens_details") or {}).get("cached_tokens",
                                                                                   anthropic_cached))
        if isinstance(cached, int) and cached >= 0:
            self.cached_tokens = cached
        for name, rate in (("prompt_per_second", timings.get("prompt_per_second")),
                           ("predicted_per_second", timings.get("predicted_per_second"))):
            if isinstance(rate, (int, float)) and rate > 0:
                setattr(self, name, float(rate))


class UsageSniffer:
    """Feed it a stream's chunks; `usage` holds the last counts reported."""

    def __init__(self, usage: Usage | None = None) -> None:
        self.usage = usage if usage is not None else Usage()

    def feed(self, chunk: bytes) -> None:
        self.usage.relayed_tokens += len(CONTENT_EVENT.findall(chunk))
        if b'"usage"' not in chunk and b'"timings"' not in chunk:
            return
        for line in chunk.split(b"\n"):
            if line.startswith(b"data: {") and (b'"usage"' in line or b'"timings"' in line):
                try:
                    data = json.loads(line[6:])
                except ValueError:
                    continue  # an event cut between two reads: its twin arrives whole next time
                if isinstance(data, dict):
                    self.usage.absorb(data)
