"""The scheduling decision: a pure function over a snapshot of the fleet and its live load.

No Django, no I/O: unit tests feed it snapshots. Claiming the chosen worker's slot is a separate
atomic step (core.live), so the choice here is a ranked preference list with a reason for
each place, and the gateway walks it until a claim succeeds.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A request to a worker without a key (one registered by hand, or a test's).
JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class WorkerView:
    id: int
    name: str
    base_url: str
    pool_id: int
    pool_name: str
    model_id: str
    slots: int
    state: str
    context: int = 0  # tokens one request can use (llama-server's context per slot); 0: unknown
    # A lane worker, kept for short prompts: it takes only prompts of at most this many tokens (by
    # the byte estimate); 0: an ordinary worker, any prompt.
    lane_tokens: int = 0
    # What every request to it carries (its key, fleet/worker_keys.py), built once per snapshot
    # so the hot path only looks it up. Out of repr and comparisons: it holds a secret.
    upstream_headers: Mapping[str, str] = field(default_factory=lambda: JSON_HEADERS, repr=False, compare=False)


@dataclass(frozen=True)
class Candidate:
    worker: WorkerView
    busy: int
    reason: str

    @property
    def free(self) -> int:
        return max(0, self.worker.slots - self.busy)


@dataclass(frozen=True)
class Decision:
    """Workers to try in order, and why; `excluded` says why the others were left out.
    `lent_by` names the pools whose workers were borrowed because the key's pool had none."""

    ranked: list[Candidate]
    excluded: dict[str, str] = field(default_factory=dict)
    lent_by: tuple[str, ...] = ()
    affinity_worker_id: int | None = None  # the worker that served this conversation last, if any
    # Free slots on lane workers this request may not use (its prompt is too long for them): the
    # line's pump lets a short prompt behind it have one (inference/admission/rules.passes_lane).
    lane_free: int = 0


ROUTABLE_STATES = frozenset({"healthy", "degraded"})
# A lane worker's limit where none is given (demo --lane-workers): a question or a chat of a few
# turns (about 4 kB of request body), not an agent's turn, whose first request alone is 5-20k
# tokens (docs/classroom.md).
LANE_TOKENS = 1024


def fits_lane(worker: WorkerView, prompt_tokens_estimate: int) -> bool:
    """Whether a lane worker takes this prompt (an ordinary worker takes any)."""
    return not worker.lane_tokens or prompt_tokens_estimate <= worker.lane_tokens


def _eligible(
    workers: Iterable[WorkerView], *, model_id: str, pool_ids: frozenset[int], avoid: frozenset[int],
    excluded: dict[str, str], min_context: int = 0, prompt_tokens_estimate: int = 0,
) -> tuple[list[WorkerView], list[WorkerView]]:
    """(the workers that may serve this request, the lane workers left out because it is long)."""
    chosen, kept = [], []
    for worker in workers:
        if worker.pool_id not in pool_ids or worker.model_id != model_id:
            continue
        if worker.state not in ROUTABLE_STATES:
            excluded[worker.name] = f"state {worker.state}"
        elif worker.id in avoid:
            excluded[worker.name] = "failed earlier in this request"
        elif worker.context and worker.context < min_context:
            excluded[worker.name] = f"context of {worker.context} tokens is too small for this request"
        elif not fits_lane(worker, prompt_tokens_estimate):
            excluded[worker.name] = (f"kept for short prompts (at most {worker.lane_tokens} tokens; "
                                     f"this one is about {prompt_tokens_estimate})")
            kept.append(worker)
        else:
            chosen.append(worker)
    return chosen, kept


def rank_workers(
    *,
    workers: list[WorkerView],
    busy: dict[int, int],
    model_id: str,
    pool_id: int,
    avoid: frozenset[int] = frozenset(),
    suspects: frozenset[int] = frozenset(),
    affinity_worker_id: int | None = None,
    lending_pool_ids: frozenset[int] = frozenset(),
    min_context: int = 0,
    prompt_tokens_estimate: int = 0,
) -> Decision:
    """Rank the workers that may serve `model_id` for a key in `pool_id`.

    1. Candidates: the key's pool, serving the model, in a routable state, not failed earlier
       in this request, and not a lane worker kept for shorter prompts than this one (never, even
       when idle: a long prefill there would hold the questions it is kept for). If there is
       none, workers of the pools that may lend (promotion).
    2. A short prompt goes first to a lane worker with a free slot (the quiet student's question
       is not queued behind the class's agents).
    3. The worker that served this conversation before comes first while it has a free slot
       and is sound (its KV cache holds the prompt's prefix: llama-server's cache_prompt).
    4. Workers whose context per slot can hold the prompt (by a byte-based estimate) before
       those that may be too small; a worker known to be too small (`min_context`, learnt from
       a worker's refusal) is left out.
    5. Sound workers (healthy, not suspect) before degraded or suspect ones.
    6. Least loaded relative to its slots; then more free slots; then name, for stability.
    """
    excluded: dict[str, str] = {}
    chosen, kept = _eligible(workers, model_id=model_id, pool_ids=frozenset({pool_id}), avoid=avoid,
                             excluded=excluded, min_context=min_context, prompt_tokens_estimate=prompt_tokens_estimate)
    lent_by: tuple[str, ...] = ()
    if not chosen and lending_pool_ids - {pool_id}:
        chosen, kept_lent = _eligible(workers, model_id=model_id, pool_ids=lending_pool_ids - {pool_id}, avoid=avoid,
                                      excluded=excluded, min_context=min_context,
                                      prompt_tokens_estimate=prompt_tokens_estimate)
        kept += kept_lent
        lent_by = tuple(sorted({w.pool_name for w in chosen}))

    def sound(worker: WorkerView) -> bool:
        return worker.state == "healthy" and worker.id not in suspects

    def holds_prompt(worker: WorkerView) -> bool:
        return not worker.context or worker.context > prompt_tokens_estimate

    def lane_open(worker: WorkerView, load: int) -> bool:
        return bool(worker.lane_tokens) and sound(worker) and load < worker.slots

    candidates = []
    for worker in chosen:
        load = busy.get(worker.id, 0)
        if lane_open(worker, load):
            reason = f"kept for short prompts (at most {worker.lane_tokens} tokens), {load}/{worker.slots} slots busy"
        elif worker.id == affinity_worker_id and sound(worker) and load < worker.slots:
            reason = "served this conversation before (prompt cache)"
        else:
            reason = f"{load}/{worker.slots} slots busy"
            if worker.id in suspects:
                reason += ", suspect after a failed request"
            if worker.state == "degraded":
                reason += ", degraded"
            if not holds_prompt(worker):
                reason += f", context {worker.context} may be too small"
        if lent_by:
            reason += f", lent by pool {worker.pool_name}"
        candidates.append(Candidate(worker=worker, busy=load, reason=reason))

    candidates.sort(
        key=lambda c: (
            not lane_open(c.worker, c.busy),
            not (c.worker.id == affinity_worker_id and sound(c.worker) and c.free > 0),
            not holds_prompt(c.worker),
            not sound(c.worker),
            c.busy / max(1, c.worker.slots),
            -c.free,
            c.worker.name,
        )
    )
    lane_free = sum(max(0, w.slots - busy.get(w.id, 0)) for w in kept if sound(w))
    return Decision(ranked=candidates, excluded=excluded, lent_by=lent_by, affinity_worker_id=affinity_worker_id,
                    lane_free=lane_free)


def serves_model(workers: list[WorkerView], *, model_id: str, pool_ids: Iterable[int]) -> bool:
    pools = set(pool_ids)
    return any(w.model_id == model_id and w.pool_id in pools for w in workers)


def conversation_key(*, user_id: int, model_id: str, messages: list[Any]) -> str:
    """Identifies a student's conversation across turns: the same student, model, and opening
    (system prompt and first user message), which every later turn repeats as its prefix."""
    opening: list[Any] = []
    for message in messages:
        opening.append(message)
        if isinstance(message, dict) and message.get("role") == "user":
            break
    digest = hashlib.sha256(json.dumps([user_id, model_id, opening], sort_keys=True, default=str).encode())
    return digest.hexdigest()[:32]
