"""Admission's decisions as pure functions (the gateway's line and the planner both call them)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.scheduler import Candidate, Decision, WorkerView
from inference.admission import rules


def view(number: int, slots: int = 2) -> WorkerView:
    return WorkerView(id=number, name=f"w{number}", base_url="", pool_id=1, pool_name="p", model_id="m", slots=slots,
                      state="healthy")


def test_a_new_request_claims_directly_only_when_nobody_waits_anywhere() -> None:
    assert rules.may_claim_directly(waiting_here=0, turn=None)
    assert not rules.may_claim_directly(waiting_here=1, turn=None)
    assert not rules.may_claim_directly(waiting_here=0, turn="another-process-request")


def test_claims_try_the_ranked_workers_with_a_free_slot_in_order() -> None:
    decision = Decision(ranked=[Candidate(view(1), busy=2, reason=""), Candidate(view(2), busy=1, reason=""),
                                Candidate(view(3), busy=0, reason="")])
    assert [c.worker.id for c in rules.claim_order(decision)] == [2, 3]


def test_a_waiter_too_long_for_the_free_lane_slot_lets_the_next_in_line_try() -> None:
    """passes_lane: only when nothing this request may use is free and a lane worker's slot is."""
    lane = replace(view(3), lane_tokens=1024)
    full = Decision(ranked=[Candidate(view(1), busy=2, reason="")], lane_free=1)
    assert rules.passes_lane(full) and rules.lane_slot_free(full)
    assert not rules.passes_lane(Decision(ranked=[Candidate(view(1), busy=1, reason="")], lane_free=1))
    assert not rules.passes_lane(Decision(ranked=[Candidate(view(1), busy=2, reason="")], lane_free=0))
    short = Decision(ranked=[Candidate(lane, busy=0, reason=""), Candidate(view(1), busy=0, reason="")])
    assert [c.worker.id for c in rules.claim_order(short, lanes_only=True)] == [3]
    assert rules.lane_slot_free(short) and not rules.passes_lane(short)
    assert rules.claim_order(Decision(ranked=[Candidate(view(1), busy=0, reason="")]), lanes_only=True) == []


def test_no_routable_worker_is_a_refusal_naming_the_failures_if_any() -> None:
    empty = Decision(ranked=[])
    assert rules.no_worker_refusal(empty, {}) == ("no_worker_available", "")
    failures = {1: "w1: refused", 2: "w2: 502"}
    assert rules.no_worker_refusal(empty, failures) == ("upstream_error", "w1: refused; w2: 502")
    assert rules.no_worker_refusal(Decision(ranked=[Candidate(view(1), busy=2, reason="")]), {}) is None


def test_waits_end_at_the_deadline_on_the_callers_clock() -> None:
    deadline = rules.wait_deadline(started=100.0, max_wait_s=30.0)
    assert deadline == 130.0
    assert not rules.timed_out(deadline=deadline, now=129.9)
    assert rules.timed_out(deadline=deadline, now=130.0)
    assert rules.queue_timeout_retry_after_s(30.0) == 10 and rules.queue_timeout_retry_after_s(1.0) == 1


def test_the_estimate_and_the_settlement_add_up_to_the_real_cost() -> None:
    estimate = rules.estimate_charge("tokens", prompt_bytes=4000, weight=1.0)
    assert estimate == 1000.0  # 4,000 bytes, 4 bytes a token, nothing cached
    settled = rules.settle_amount("tokens", charged_policy="tokens", charged=estimate, computed_prompt_tokens=200,
                                  output_tokens=10, weight=1.0)
    assert estimate + settled == pytest.approx(200 + 10 * 4.0)
    # charged under another policy (switched meanwhile): the whole real cost
    assert rules.settle_amount("tokens", charged_policy="requests", charged=1.0, computed_prompt_tokens=200,
                               output_tokens=10) == pytest.approx(240.0)
    assert rules.estimate_charge("requests", prompt_bytes=4000) == 1.0


def test_the_light_lane_keeps_slot_0_for_short_prompts_under_the_token_fair_policy() -> None:
    light, heavy = 4 * 200, 4 * 2000  # bodies of ~200 and ~2,000 prompt tokens by the byte estimate
    assert rules.lane(policy="tokens", slots=4, prompt_bytes=light, light_tokens=512) == (0, rules.LANE_SLOT)
    assert rules.lane(policy="tokens", slots=4, prompt_bytes=heavy, light_tokens=512) == (rules.LANE_SLOT + 1, None)
    assert rules.lane(policy="tokens", slots=4, prompt_bytes=4 * 512, light_tokens=512) == (0, rules.LANE_SLOT)
    # off: under today's round-robin, when turned off, and on a worker of few slots (it would
    # take half of a 2-slot worker from agents, and all of a 1-slot one)
    assert rules.lane(policy="requests", slots=4, prompt_bytes=heavy, light_tokens=512) == (0, None)
    assert rules.lane(policy="tokens", slots=4, prompt_bytes=heavy, light_tokens=0) == (0, None)
    assert rules.lane(policy="tokens", slots=rules.LANE_MIN_SLOTS - 1, prompt_bytes=heavy, light_tokens=512) == (0, None)


def test_a_long_prompt_waits_a_little_for_its_conversations_worker_when_it_is_full() -> None:
    full, free = Candidate(view(1), busy=2, reason=""), Candidate(view(2), busy=0, reason="")
    decision = Decision(ranked=[free, full], affinity_worker_id=1)
    hold = lambda **kw: rules.affinity_hold(decision, **{"prompt_bytes": 4 * 5000, "waited_s": 1.0,  # noqa: E731
                                                         "hold_tokens": 1024, "hold_s": 5.0, **kw})
    assert hold()  # 5,000 tokens would be computed again on worker 2: wait for worker 1
    assert not hold(waited_s=5.0)  # waited long enough: take the free slot
    assert not hold(prompt_bytes=4 * 500)  # a short prompt costs little to compute elsewhere
    assert not hold(hold_s=0.0)  # turned off
    assert not rules.affinity_hold(Decision(ranked=[free, full]), prompt_bytes=4 * 5000, waited_s=1.0,
                                   hold_tokens=1024, hold_s=5.0)  # no conversation worker known
    assert not rules.affinity_hold(Decision(ranked=[free], affinity_worker_id=1), prompt_bytes=4 * 5000,
                                   waited_s=1.0, hold_tokens=1024, hold_s=5.0)  # it is gone (not routable)
    assert not rules.affinity_hold(Decision(ranked=[Candidate(view(1), busy=1, reason=""), free],
                                            affinity_worker_id=1),
                                   prompt_bytes=4 * 5000, waited_s=1.0, hold_tokens=1024, hold_s=5.0)  # it has room


def test_a_student_may_hold_half_a_models_slots_while_classmates_wait_and_all_of_them_otherwise() -> None:
    assert not rules.over_share(held=1, total_slots=4, classmates_waiting=True)
    assert rules.over_share(held=2, total_slots=4, classmates_waiting=True)
    assert not rules.over_share(held=3, total_slots=4, classmates_waiting=False)  # nobody waits: every slot
    assert rules.over_share(held=1, total_slots=1, classmates_waiting=True)  # one slot: one each in turn
    assert not rules.over_share(held=4, total_slots=9, classmates_waiting=True)  # half of 9, rounded up: 5


def test_one_student_holds_at_most_half_a_lane_worker_and_always_may_take_one_slot() -> None:
    assert not rules.lane_share_full(held=0, slots=1) and rules.lane_share_full(held=1, slots=1)
    assert not rules.lane_share_full(held=0, slots=2) and rules.lane_share_full(held=1, slots=2)
    assert not rules.lane_share_full(held=1, slots=4) and rules.lane_share_full(held=2, slots=4)
