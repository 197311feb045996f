"""A worker's cost model: how long one llama-server step takes. Pure, no Django, no I/O.

llama-server runs its slots in one loop: every iteration is one batch (at most `batch_tokens`,
its `-b`, default 2,048) holding one token of each slot that is generating and, in the room left,
chunks of the prompts of slots that are still evaluating theirs (slot by slot, in slot order). So:

    step seconds = decode_s(slots generating, their context) + prefill_s_per_token x prompt tokens in the step
    decode_s(n, context) = decode_s_per_token + decode_s_per_extra_slot x (n - 1)
                           + decode_s_per_context_token x (tokens of context of the n slots)   (n >= 1; 0 when n = 0)

From that, with nothing else running, a prompt of P uncached tokens takes
`request_overhead_s + P x prefill_s_per_token` to its first token, and each further token takes
`decode_s_per_token`; with n slots generating beside it, every chunk of its prompt also waits for
their decode, so prompt evaluation slows with the batch, and each generating slot's time per token
grows by `decode_s_per_extra_slot` per other slot (one weight read serves them all; the extra is
their KV reads and compute). Tokens found in the slot's own cache cost nothing (llama-server keeps
them in the slot's KV). `request_overhead_s` is everything outside the loop before the first
token (HTTP, the gateway, the chat template, tokenizing), taken to overlap with other slots' work.

All times in seconds. `cache_type` is the KV cache type the numbers were measured with: the
per-context-token decode cost scales with its bytes per element when a plan uses another.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from fleet.gguf import KV_BYTES_PER_ELEMENT

DEFAULT_BATCH_TOKENS = 2048


@dataclass(frozen=True)
class CostModel:
    prefill_s_per_token: float
    decode_s_per_token: float
    decode_s_per_extra_slot: float = 0.0
    decode_s_per_context_token: float = 0.0
    request_overhead_s: float = 0.0
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    cache_type: str = "f16"

    def __post_init__(self) -> None:
        if self.prefill_s_per_token < 0 or self.decode_s_per_token <= 0 or self.batch_tokens < 1:
            raise ValueError("a cost model needs prefill >= 0 and decode > 0 seconds per token, and a batch of >= 1")
        if self.cache_type not in KV_BYTES_PER_ELEMENT:
            raise ValueError(f"cache type {self.cache_type!r}: expected one of {', '.join(KV_BYTES_PER_ELEMENT)}")

    def decode_s(self, generating: int, context_tokens: int = 0, cache_type: str | None = None) -> float:
        """Seconds of one step's decode part: `generating` slots produce a token each, holding
        `context_tokens` tokens of context between them, with a KV cache of `cache_type`."""
        if generating <= 0:
            return 0.0
        kv_scale = KV_BYTES_PER_ELEMENT[cache_type or self.cache_type] / KV_BYTES_PER_ELEMENT[self.cache_type]
        return (self.decode_s_per_token + self.decode_s_per_extra_slot * (generating - 1)
                + self.decode_s_per_context_token * kv_scale * max(0, context_tokens))

    def step_s(self, *, generating: int, prompt_tokens: int, context_tokens: int = 0,
               cache_type: str | None = None) -> float:
        """Seconds of one iteration: the decode of `generating` slots plus `prompt_tokens` of prompt."""
        return self.decode_s(generating, context_tokens, cache_type) + self.prefill_s_per_token * max(0, prompt_tokens)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CostModel:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})
