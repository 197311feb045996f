"""Admission's decisions, without its waiting: pure functions, the clock passed in, no I/O.

`inference/admission/line.py` (the gateway's async line, live state, the pump) calls these for every
decision it takes, and the capacity planner's simulator (research/planner/) calls the same ones,
so a change here changes both the gateway and its prediction:

- how many tokens a body of N bytes is taken to hold (routing, the fair-share estimate);
- the fair-share charge of a request before it ran (its prompt by that estimate, nothing cached);
- whether a request may claim a slot at once (nobody waiting: no barging past classmates);
- which ranked workers to try, in order, and the refusal when none could ever serve;
- how long a request may wait, and the `retry-after` of a request that waited too long;
- a student's share of a model's slots while classmates wait (`over_share`);
- the light lane: which of a worker's slots a request may claim (`lane`; which slot-file steps a
  light request skips is inference/admission/slot_owners.handover's, atomic with the claim);
- whether a long prompt waits a little for the worker that holds its prefix (`affinity_hold`);
- what a streaming answer adds to the counter as it goes (`streamed_charge`), and what a request
  is charged when it ends (`settle_amount`).

Times are seconds on one monotonic clock the caller chooses.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from inference.admission.fair_share import TOKEN_FAIR, charge
from fleet.scheduler import Candidate, Decision

# English text and code average 3.5-4.5 bytes per token with Llama-family tokenizers: a body of N
# bytes (JSON syntax included) holds fewer than N / 4 tokens of prompt, usually.
BYTES_PER_TOKEN = 4


def prompt_tokens_estimate(prompt_bytes: int) -> int:
    """The prompt tokens a request body of `prompt_bytes` bytes is taken to hold (an upper bound, usually)."""
    return max(0, prompt_bytes) // BYTES_PER_TOKEN


def estimate_charge(policy: str, *, prompt_bytes: int, weight: float = 1.0) -> float:
    """A request's fair-share charge before it ran: its prompt by the byte estimate, as if
    nothing were cached, no output yet (settled to the real counts when it ends)."""
    return charge(policy, computed_prompt_tokens=prompt_tokens_estimate(prompt_bytes), output_tokens=0,
                  weight=weight)


def may_claim_directly(*, waiting_here: int, turn: str | None) -> bool:
    """A new request tries to claim a slot at once only when nobody waits in the line, neither in
    this process (`waiting_here`) nor anywhere (`turn`: the shared line's next request, None
    when empty); otherwise it joins the line behind them."""
    return waiting_here == 0 and turn is None


# The light lane (off unless OCS_LIGHT_LANE_TOKENS is set). Under the token-fair policy, slot 0 of a
# worker with LANE_MIN_SLOTS slots or more is kept for light requests (a prompt of at most
# OCS_LIGHT_LANE_TOKENS by the byte estimate: a question, not an agent's turn), and a light request
# takes it first. llama-server fills each batch with prompt chunks in slot order, so slot 0 is
# also prefilled first. What it gave in the class replay, and why it is off by default (it pays
# only with a small batch, which starves the other slots' prefills): docs/classroom.md.
LANE_MIN_SLOTS = 4
LANE_SLOT = 0


def lane(*, policy: str, slots: int, prompt_bytes: int, light_tokens: int) -> tuple[int, int | None]:
    """(the first slot index this request may claim, the slot it takes first when free). Off
    (0, None) under the request round-robin, with light_tokens 0, or on a worker of few slots."""
    if policy not in TOKEN_FAIR or light_tokens <= 0 or slots < LANE_MIN_SLOTS:
        return 0, None
    if prompt_tokens_estimate(prompt_bytes) <= light_tokens:
        return 0, LANE_SLOT
    return LANE_SLOT + 1, None


def affinity_hold(decision: Decision, *, prompt_bytes: int, waited_s: float, hold_tokens: int,
                  hold_s: float) -> bool:
    """Whether a request waits for its conversation's worker, busy now, instead of taking a free
    slot elsewhere: the worker that holds its prefix (in a slot, or in the student's slot file) is
    still routable and full, the prompt is long enough that computing it elsewhere costs more than
    a short wait (at least `hold_tokens` by the byte estimate), and it has waited less than
    `hold_s` (OCS_AFFINITY_WAIT_S; 0: never). Past that it takes any free slot."""
    if decision.affinity_worker_id is None or hold_s <= 0 or waited_s >= hold_s:
        return False
    if prompt_tokens_estimate(prompt_bytes) < hold_tokens:
        return False
    for candidate in decision.ranked:
        if candidate.worker.id == decision.affinity_worker_id:
            return candidate.free == 0
    return False


def claim_order(decision: Decision, *, lanes_only: bool = False) -> list[Candidate]:
    """The ranked workers a claim tries, in order: those with a free slot by the snapshot
    (`lanes_only`: only lane workers', fleet/scheduler.py)."""
    return [candidate for candidate in decision.ranked
            if candidate.free > 0 and (candidate.worker.lane_tokens or not lanes_only)]


def lane_share_full(*, held: int, slots: int) -> bool:
    """Whether a student already holds their share of a lane worker: at most half its slots (at
    least one), whether or not a classmate waits, so that a lane keeps room for the next quiet
    student's question instead of filling with one student's loop of short requests."""
    return held >= max(1, slots // 2)


def passes_lane(decision: Decision) -> bool:
    """Whether a waiter that cannot claim lets the next in line try: a lane worker has a free slot
    that this request may not use (its prompt is too long), and a short prompt behind it may.
    Only a slot nobody ahead could take is given to someone behind, so the order still holds."""
    return not claim_order(decision) and decision.lane_free > 0


def lane_slot_free(decision: Decision) -> bool:
    """Whether any lane worker has a free slot, for this request or not."""
    return decision.lane_free > 0 or bool(claim_order(decision, lanes_only=True))


def no_worker_refusal(decision: Decision, failed: Mapping[int, str]) -> tuple[str, str] | None:
    """Why a request can never be served now (no routable worker at all), as (code, detail):
    `upstream_error` with the failures of the workers it tried, or `no_worker_available`;
    None while some worker may serve it (perhaps after a wait)."""
    if decision.ranked:
        return None
    if failed:
        return "upstream_error", "; ".join(failed.values())
    return "no_worker_available", ""


def wait_deadline(*, started: float, max_wait_s: float) -> float:
    """When a request that started waiting at `started` gives up (OCS_QUEUE_MAX_WAIT_S)."""
    return started + max(0.0, max_wait_s)


def wait_left_s(*, deadline: float, now: float) -> float:
    """Seconds a waiting request may still wait; <= 0: it is refused now (queue_timeout)."""
    return deadline - now


def timed_out(*, deadline: float, now: float) -> bool:
    return wait_left_s(deadline=deadline, now=now) <= 0


def queue_timeout_retry_after_s(slot_lease_s: float) -> int:
    """The `retry-after` of a request refused for waiting too long: a third of a slot lease, at least 1 s."""
    return max(1, int(slot_lease_s // 3))


# While classmates wait, one student may hold at most this share of a model's slots (at least
# one): past it, their next request lets a classmate's take the slot that frees. Nobody waiting,
# a student may use every slot.
SLOT_SHARE = 0.5


def over_share(*, held: int, total_slots: int, classmates_waiting: bool) -> bool:
    """Whether a student holding `held` of a model's `total_slots` must let a waiting classmate
    have the next free slot."""
    return classmates_waiting and held >= max(1, math.ceil(total_slots * SLOT_SHARE))


# While an answer streams, its student's counter is charged for the output relayed so far every
# this many tokens (one live-state round trip each): a student's running streams weigh on their
# turn while classmates wait, and a stream the client cuts has paid for what it got.
STREAM_CHARGE_TOKENS = 32


def streamed_charge(policy: str, *, output_tokens: int, weight: float = 1.0) -> float:
    """What `output_tokens` relayed add to the counter while the answer still streams: their cost
    under "tokens"; nothing under "requests" (a request there costs 1, once)."""
    if policy not in TOKEN_FAIR or output_tokens <= 0:
        return 0.0
    return charge(policy, computed_prompt_tokens=0, output_tokens=output_tokens, weight=weight)


def settle_amount(policy: str, *, charged_policy: str, charged: float, computed_prompt_tokens: int,
                  output_tokens: int, weight: float = 1.0) -> float:
    """What a request's student is charged when it ends: its real cost under `policy`, less what
    was charged already under the same policy (the estimate when it left the line, and the
    output charged while it streamed)."""
    real = charge(policy, computed_prompt_tokens=computed_prompt_tokens, output_tokens=output_tokens, weight=weight)
    return real - (charged if charged_policy == policy else 0.0)
