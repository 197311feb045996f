"""A worker's cost model: how long one llama-server step takes. Pure, no Django, no I/O.

llama-server runs its slots in one loop: every iteration is one batch (at most `batch_tokens`,
its `-b`, default 2,048) holding one token of each slot that is generating and, in the room left,
chunks of the prompts of slots that are still evaluating theirs (slot by slot, in slot order). So:

    step seconds = decode_s(slots generating, their context) + prefill_s(the step's prompt chunks)
    prefill_s(chunks) = sum over chunks of  prefill_s_per_token x n
                                          + prefill_s_per_context_token x n x (c + (n - 1) / 2)
                                          + small_chunk_s_per_context_token x min(n, small_chunk_tokens) x c
                        (a chunk of n prompt tokens after c tokens already in its slot: each new
                        token also attends to every token before it; and the first
                        small_chunk_tokens of a chunk read the tokens before it more slowly)
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

The small-chunk term is what a CPU worker measured (docs/research/planner-validation.md, fifth
pass): a prompt chunk of a few dozen tokens after a long cached prefix, an agent's next turn,
takes about three times longer per (new token, cached token) pair than a chunk of hundreds of
tokens does; the matrix kernels are efficient only from some batch size on. `fit._fit_prompt`
fits the size (0: no such term) and the extra cost from turns of different sizes after one cached
prefix (`bench --prefix-tokens`).

All times in seconds. `cache_type` is the KV cache type the numbers were measured with: the
per-context-token decode cost scales with its bytes per element when a plan uses another.

`contention` is how much longer a step takes for each other worker of the fleet computing at
the same time: workers that share compute (the CPU demo's, whose threads share this machine's
cores) slow each other; on a rig, where each worker has its own cards, it is 0. A step of `s`
seconds alone runs at a rate of 1 / (1 + contention x others computing), re-timed whenever another
worker starts or stops (research/planner/sim.py); fitted by comparing a worker's bench alone with
its bench while every worker of the host is benched at once (fit.fit_contention).

`jitter` is how much the same step's time varies from one time to the next on the worker (the
relative standard deviation of identical requests' TTFTs in a bench run): what makes two real
runs of one class differ. A simulation given a noise seed draws each step's time around its
cost with it (sim.py); plan.predict averages replicates so drawn.

`tokens` is how the worker's tokenizer and chat template count a prompt (TokenModel), measured
by `calibrate_worker --count-tokens`; None: the planner's old fixed guess (4 characters a token,
4 tokens a message).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from fleet.gguf import KV_BYTES_PER_ELEMENT

DEFAULT_BATCH_TOKENS = 2048


DEFAULT_CHARS_PER_TOKEN = 4.0
DEFAULT_TOKENS_PER_MESSAGE = 4


@dataclass(frozen=True)
class TokenModel:
    """How many tokens a prompt's text is, as the worker counts it: characters per token by the
    kind of segment (`system`, `user`, `assistant`, `tool`: a tool's result, `call`: a tool call),
    whether the template renders tool calls at all, the chat template's
    tokens around each message, and the tokens it adds once per prompt (BOS, the generation
    prompt), with and without a system message of the request's own (some templates, SmolLM2's,
    put a default system prompt in when there is none)."""

    chars_per_token: dict[str, float] = field(default_factory=dict)
    tokens_per_message: float = DEFAULT_TOKENS_PER_MESSAGE
    head_tokens: float = 0.0
    head_tokens_no_system: float = 0.0
    # whether the chat template puts an assistant message's tool calls into the prompt (kind
    # "call"); SmolLM2's drops them. True for a model measured before this was (it counted them).
    renders_tool_calls: bool = True

    def chars_per_token_of(self, kind: str) -> float:
        # a model measured before calls were a kind of their own measured them inside "assistant"
        fallback = "assistant" if kind == "call" and "call" not in self.chars_per_token else "user"
        value = self.chars_per_token.get(kind) or self.chars_per_token.get(fallback)
        return value if value and value > 0 else DEFAULT_CHARS_PER_TOKEN

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenModel:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def chunk_pairs(tokens: int, context_before: int) -> float:
    """Pairs (new token, token before it in the slot) of a chunk of `tokens` prompt tokens after
    `context_before` tokens: what the per-context prefill term multiplies."""
    n = max(0, tokens)
    return n * (max(0, context_before) + (n - 1) / 2) if n else 0.0


def small_chunk_pairs(tokens: int, context_before: int, limit: int) -> float:
    """Pairs (one of a chunk's first `limit` tokens, a token in the slot before the chunk): what
    the small-chunk prefill term multiplies."""
    return float(min(max(0, tokens), max(0, limit)) * max(0, context_before))


@dataclass(frozen=True)
class CostModel:
    prefill_s_per_token: float
    decode_s_per_token: float
    decode_s_per_extra_slot: float = 0.0
    decode_s_per_context_token: float = 0.0
    request_overhead_s: float = 0.0
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    cache_type: str = "f16"
    prefill_s_per_context_token: float = 0.0
    tokens: TokenModel | None = None
    contention: float = 0.0
    jitter: float = 0.0
    small_chunk_tokens: int = 0
    small_chunk_s_per_context_token: float = 0.0

    def __post_init__(self) -> None:
        if self.prefill_s_per_token < 0 or self.decode_s_per_token <= 0 or self.batch_tokens < 1:
            raise ValueError("a cost model needs prefill >= 0 and decode > 0 seconds per token, and a batch of >= 1")
        if self.small_chunk_tokens < 0 or self.small_chunk_s_per_context_token < 0:
            raise ValueError("the small-chunk term (tokens, seconds per pair) is >= 0")
        if self.contention < 0 or self.jitter < 0:
            raise ValueError("contention (a slowdown per other worker computing) and jitter (a relative spread) "
                             "are >= 0")
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

    def small_pairs(self, tokens: int, context_before: int) -> float:
        """The small-chunk pairs of one chunk (small_chunk_pairs at this model's size)."""
        return small_chunk_pairs(tokens, context_before, self.small_chunk_tokens)

    def prefill_s(self, prompt_tokens: int, prompt_pairs: float = 0.0, cache_type: str | None = None,
                  small_pairs: float = 0.0) -> float:
        """Seconds of `prompt_tokens` of prompt whose chunks hold `prompt_pairs` (chunk_pairs) and
        `small_pairs` (small_pairs), each summed over the chunks."""
        kv_scale = KV_BYTES_PER_ELEMENT[cache_type or self.cache_type] / KV_BYTES_PER_ELEMENT[self.cache_type]
        return (self.prefill_s_per_token * max(0, prompt_tokens)
                + kv_scale * (self.prefill_s_per_context_token * max(0.0, prompt_pairs)
                              + self.small_chunk_s_per_context_token * max(0.0, small_pairs)))

    def ttft_alone_s(self, uncached_tokens: int, cached_tokens: int = 0) -> float:
        """Time to first token of a prompt evaluated with nothing else in the loop (one chunk)."""
        return self.request_overhead_s + self.prefill_s(uncached_tokens, chunk_pairs(uncached_tokens, cached_tokens),
                                                        small_pairs=self.small_pairs(uncached_tokens, cached_tokens))

    def step_s(self, *, generating: int, prompt_tokens: int, context_tokens: int = 0,
               cache_type: str | None = None, prompt_pairs: float = 0.0, small_pairs: float = 0.0) -> float:
        """Seconds of one iteration: the decode of `generating` slots plus `prompt_tokens` of prompt
        (`prompt_pairs`, `small_pairs`: their chunks' pairs, summed)."""
        return (self.decode_s(generating, context_tokens, cache_type)
                + self.prefill_s(prompt_tokens, prompt_pairs, cache_type, small_pairs))

    def rate(self, others_computing: int) -> float:
        """Seconds of a step alone done per second while `others_computing` other workers compute."""
        return 1.0 / (1.0 + self.contention * max(0, others_computing))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CostModel:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        if isinstance(values.get("tokens"), dict):
            values["tokens"] = TokenModel.from_dict(values["tokens"])
        return cls(**values)
