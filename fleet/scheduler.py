"""The scheduling decision: a pure function over a snapshot of the fleet and its live load.

No Django, no I/O: unit tests feed it snapshots. Claiming the chosen worker's slot is a separate
atomic step (ocsweb.live), so the choice here is a ranked preference list, and the gateway walks
it until a claim succeeds.
"""
from __future__ import annotations

from dataclasses import dataclass, field


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
    """Workers to try in order, and why; `excluded` says why the others were left out."""

    ranked: list[Candidate]
    excluded: dict[str, str] = field(default_factory=dict)


ROUTABLE_STATES = frozenset({"healthy", "degraded"})


def rank_workers(
    *,
    workers: list[WorkerView],
    busy: dict[int, int],
    model_id: str,
    pool_id: int,
    avoid: frozenset[int] = frozenset(),
) -> Decision:
    """Rank the workers that may serve `model_id` for a key in `pool_id`.

    Rules, in order: same pool; serves the model; routable state (healthy before degraded);
    not in `avoid` (workers this request already failed on); then least loaded relative to
    its slots, ties broken by more free slots, then name (stable)."""
    excluded: dict[str, str] = {}
    eligible: list[Candidate] = []
    for worker in workers:
        if worker.pool_id != pool_id:
            continue
        if worker.model_id != model_id:
            continue
        if worker.state not in ROUTABLE_STATES:
            excluded[worker.name] = f"state {worker.state}"
            continue
        if worker.id in avoid:
            excluded[worker.name] = "failed earlier in this request"
            continue
        load = busy.get(worker.id, 0)
        eligible.append(Candidate(worker=worker, busy=load, reason=f"{load}/{worker.slots} slots busy"))
    eligible.sort(
        key=lambda c: (
            c.worker.state != "healthy",
            c.busy / max(1, c.worker.slots),
            -c.free,
            c.worker.name,
        )
    )
    return Decision(ranked=eligible, excluded=excluded)


def serves_model(workers: list[WorkerView], *, model_id: str, pool_id: int) -> bool:
    return any(w.model_id == model_id and w.pool_id == pool_id for w in workers)
