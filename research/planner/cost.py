"""A worker's cost model: how long one llama-server step takes. Pure, no Django, no I/O.

llama-server runs its slots in one loop: every iteration is one batch (at most `batch_tokens`,
its `-b`, default 2,048) holding one token of each slot that is generating and, in the room left,
chunks of the prompts of slots that are still evaluating theirs (slot by slot, in slot order).
llama.cpp runs the batch as forward passes (ubatches, at most `ubatch_tokens`, its `-ub`, default
512; `ubatches` below, after the pinned build's split): with a KV stream per slot (--no-kv-unified,
every worker here), a pass holds slots of consecutive ids and as many tokens of each, so a prompt
chunk that shares its step with a neighbouring slot runs as several pieces. So:

    step seconds = decode_s(slots generating, their context) + prefill_s(the step's prompt pieces)
                   + pass_s x (passes - 1)
    prefill_s(pieces) = sum over pieces of  prefill_s_per_token x n
                                          + prefill_s_per_context_token x n x (c + (n - 1) / 2)
                                          + small_chunk_s_per_context_token x min(n, small_chunk_tokens) x c
                        (a piece of n prompt tokens after c tokens already in its slot: each new
                        token also attends to every token before it; and the first
                        small_chunk_tokens of each piece read the tokens before it more slowly)
    decode_s(n, context) = decode_s_per_token + decode_s_per_extra_slot x (n - 1)
                           + decode_s_per_context_token x (tokens of context of the n slots)   (n >= 1; 0 when n = 0)

A chunk alone, of at most a ubatch, is one piece in one pass, and slots 0..n-1 decoding together
one pass: the shapes the calibration benches, so the fit's closed forms are these. `pass_s`, a
pass's own cost beside its tokens', is a one-slot decode step less what an extra slot adds
(fit.py); measured on the pinned build (`git show 0c08046:docs/research/planner-validation/passes-probe.txt`): slots 0
and 2 decoding (two passes) take two one-slot steps, slots 0 and 1 one step and an extra slot; 60
and 80 new tokens after ~1,000 cached on slots 1 and 2 beside a decoding slot 0 take 16 % longer
than on slots 1 and 3, as the extra pieces' small-chunk term says. A slot's context costs what its
own holds, whatever its pass-mates hold (measured there too).

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

`load_factor` is how much longer every step and the request overhead take while a class keeps
the worker busy than on the benches the model was fitted to (1: the benches' speed). On the CPU
demo a class ran each configuration at its own speed against its benches (1x4 x1.15-1.23, 2x4
x1.07-1.15, 2x2 x1.0; docs/research/planner-validation.md, eleventh pass), while the shape of the
model held; `calibrate_worker --load-factor K` stores a factor measured under a class-shaped load
(scripts/validate_planner.sh LOAD_FACTOR=1: a short warm-up replay of another seed, its steps
timed from the worker's own log). On the rigs it is an assumption until a rig day measures it.

`tokens` is how the worker's tokenizer and chat template count a prompt (TokenModel), measured
by `calibrate_worker --count-tokens`; None: the planner's old fixed guess (4 characters a token,
4 tokens a message).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from fleet.gguf import KV_BYTES_PER_ELEMENT

DEFAULT_BATCH_TOKENS = 2048
DEFAULT_UBATCH_TOKENS = 512  # llama-server's -ub: the most tokens one forward pass takes


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


@dataclass(frozen=True)
class Piece:
    """A slot's tokens in one forward pass (a ubatch): `tokens` after `context` already in its slot;
    `decode`: a generating slot's one sampled token."""

    slot: int
    tokens: int
    context: int
    decode: bool = False


def ubatches(entries: Sequence[Piece], *, ubatch_tokens: int, streams: int) -> list[list[Piece]]:
    """How llama.cpp splits one step's batch (`entries` in batch order: llama-server puts the
    generating slots' tokens first, then the prompt chunks, each in slot order) into forward passes.

    With one KV stream (one slot, or --kv-unified) it cuts the batch in order into passes of at most
    `ubatch_tokens` (split_simple). With a stream per slot (--no-kv-unified, how every worker here
    runs: fleet/local_worker.ISOLATION_ARGS) it takes equal splits (llama_batch_allocr::split_equal,
    sequential): a pass holds slots of consecutive ids, starting from the first slot in batch order
    with tokens left, and the same number of tokens of each (the fewest any of them has left, at most
    `ubatch_tokens` over the number of slots). So a prompt chunk that shares a step with other slots
    is cut into several passes: a decode token of the slot before it takes one token of the chunk
    into its pass, a neighbour's chunk as many tokens as that chunk has."""
    left = [entry.tokens for entry in entries]
    context = [entry.context for entry in entries]
    passes: list[list[Piece]] = []

    def take(index: int, tokens: int) -> Piece:
        entry = entries[index]
        piece = Piece(entry.slot, tokens, context[index], entry.decode)
        left[index] -= tokens
        context[index] += tokens
        return piece

    while any(n > 0 for n in left):
        if streams <= 1:
            room, pieces = ubatch_tokens, []
            for index, n in enumerate(left):
                if n > 0 and room > 0:
                    tokens = min(n, room)
                    room -= tokens
                    pieces.append(take(index, tokens))
            passes.append(pieces)
            continue
        chosen: list[int] = []
        for index, n in enumerate(left):
            if n > 0 and (not chosen or entries[index].slot == entries[chosen[-1]].slot + 1):
                chosen.append(index)
        tokens = max(1, min(min(left[i] for i in chosen), ubatch_tokens // len(chosen)))
        passes.append([take(index, tokens) for index in chosen])
    return passes


def lone_pieces(tokens: int, context_before: int, ubatch_tokens: int = DEFAULT_UBATCH_TOKENS) -> list[Piece]:
    """A prompt chunk alone in the loop, as the forward passes it runs as (one piece each)."""
    return [piece for one in ubatches([Piece(0, tokens, context_before)], ubatch_tokens=ubatch_tokens, streams=1)
            for piece in one]


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
    ubatch_tokens: int = DEFAULT_UBATCH_TOKENS
    pass_s: float = 0.0
    load_factor: float = 1.0
    # A slot file task (a handover's save of the previous owner's prompt, or restore of the new
    # owner's) runs in the loop's own thread, between two steps: seconds per token of the file.
    slot_save_s_per_token: float = 0.0
    slot_restore_s_per_token: float = 0.0

    def __post_init__(self) -> None:
        if (self.prefill_s_per_token < 0 or self.decode_s_per_token <= 0 or self.batch_tokens < 1
                or self.ubatch_tokens < 1):
            raise ValueError("a cost model needs prefill >= 0 and decode > 0 seconds per token, and a batch and "
                             "a ubatch of >= 1 token")
        if self.small_chunk_tokens < 0 or self.small_chunk_s_per_context_token < 0:
            raise ValueError("the small-chunk term (tokens, seconds per pair) is >= 0")
        if self.pass_s < 0:
            raise ValueError("a forward pass's own cost (pass_s) is >= 0")
        if self.slot_save_s_per_token < 0 or self.slot_restore_s_per_token < 0:
            raise ValueError("a slot file task's seconds per token are >= 0")
        if not self.load_factor > 0:
            raise ValueError("the load factor (a step's time under a class against the benches') is > 0")
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

    def prefill_s(self, prompt_tokens: int, prompt_pairs: float = 0.0, cache_type: str | None = None,
                  small_pairs: float = 0.0) -> float:
        """Seconds of `prompt_tokens` of prompt whose pieces hold `prompt_pairs` (chunk_pairs) and
        `small_pairs` (small_chunk_pairs), each summed over the pieces."""
        kv_scale = KV_BYTES_PER_ELEMENT[cache_type or self.cache_type] / KV_BYTES_PER_ELEMENT[self.cache_type]
        return (self.prefill_s_per_token * max(0, prompt_tokens)
                + kv_scale * (self.prefill_s_per_context_token * max(0.0, prompt_pairs)
                              + self.small_chunk_s_per_context_token * max(0.0, small_pairs)))

    def step_s(self, batch: Sequence[Piece], *, streams: int, cache_type: str | None = None) -> float:
        """Seconds of one iteration of llama-server's loop over `batch` (one Piece a slot, in batch
        order), on a worker with `streams` KV streams (its slots): cut into forward passes
        (`ubatches`), each pass after the first costs `pass_s`, and each prompt piece pays the
        small-chunk term, as a chunk alone pays it once (module docstring)."""
        passes = ubatches(batch, ubatch_tokens=self.ubatch_tokens, streams=streams)
        pieces = [piece for one in passes for piece in one]
        decoding = [piece for piece in pieces if piece.decode]
        prompt = [piece for piece in pieces if not piece.decode]
        return self.load_factor * (
            self.decode_s(len(decoding), sum(piece.context for piece in decoding), cache_type)
            + self.prefill_s(sum(piece.tokens for piece in prompt),
                             sum(chunk_pairs(piece.tokens, piece.context) for piece in prompt), cache_type,
                             sum(small_chunk_pairs(piece.tokens, piece.context, self.small_chunk_tokens)
                                 for piece in prompt))
            + self.pass_s * (len(passes) - 1))

    def slot_task_s(self, kind: str, tokens: int) -> float:
        """Seconds the loop spends on a slot file task (`save` or `restore`) of `tokens` tokens."""
        per_token = self.slot_save_s_per_token if kind == "save" else self.slot_restore_s_per_token
        return per_token * max(0, tokens)

    @property
    def overhead_s(self) -> float:
        """Seconds before a request's prompt reaches the loop (request_overhead_s, under load)."""
        return self.request_overhead_s * self.load_factor

    def ttft_alone_s(self, uncached_tokens: int, cached_tokens: int = 0) -> float:
        """Time to first token of a prompt evaluated with nothing else in the loop."""
        return self.overhead_s + self.step_s([Piece(0, uncached_tokens, cached_tokens)], streams=1)

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
