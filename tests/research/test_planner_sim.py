"""The fleet simulator on hand-made cases with known answers, and proof that it calls the
gateway's own rules (a change to one changes the simulation)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from inference.admission import fair_share
from fleet import scheduler
from research.planner.cost import CostModel
from research.planner.sim import FleetPlan, TurnShape, cached_prefix_tokens, simulate

pytestmark = pytest.mark.backend_neutral  # pure: no database, no live state

COST = CostModel(prefill_s_per_token=0.01, decode_s_per_token=0.1, request_overhead_s=0.5, batch_tokens=4096)


@dataclass
class Scripted:
    """A student who sends `turns` in order, pausing `pauses[i]` after turn i (then stops)."""

    name: str
    turns: list[TurnShape]
    arrival_s: float = 0.0
    pauses: list[float] = field(default_factory=list)
    persona: str = "agent"
    weight: float = 1.0
    sent: int = 0
    ended: list[tuple[bool, float]] = field(default_factory=list)

    def next_turn(self) -> TurnShape:
        self.sent += 1
        return self.turns[self.sent - 1]

    def turn_ended(self, *, completed: bool, retry_after_s: float) -> float:
        self.ended.append((completed, retry_after_s))
        if not completed:
            self.sent -= 1  # sends the same turn again
        index = len(self.ended) - 1
        if self.sent >= len(self.turns):
            return 10_000.0
        return max(self.pauses[index] if index < len(self.pauses) else 0.0, retry_after_s)


def shape(*segments: tuple[str, int], output: int = 5, conversation: str = "c", prompt_bytes: int = 0) -> TurnShape:
    return TurnShape(segments=tuple(segments), prompt_bytes=prompt_bytes or 4 * sum(t for _, t in segments),
                     output_tokens=output, conversation=conversation)


def plan(**overrides: object) -> FleetPlan:
    values: dict[str, object] = {"workers": 1, "slots": 1, "context_tokens": 100_000, "duration_s": 100.0}
    values.update(overrides)
    return FleetPlan(**values)  # type: ignore[arg-type]


def by_request(turns: list) -> dict:  # noqa: ANN001
    return {(t.student, t.request_id): t for t in turns}


def test_one_slot_fixed_costs_give_exact_ttfts_and_the_second_student_waits_for_the_first() -> None:
    a = Scripted("a", [shape(("a-sys", 100), output=5, conversation="ca")])
    b = Scripted("b", [shape(("b-sys", 50), output=3, conversation="cb")], arrival_s=0.2)
    turns, duration = simulate(plan=plan(), costs=[COST], students=[a, b])
    first, second = sorted(turns, key=lambda t: t.sent_s)
    # a: 0.5 s overhead + 100 tokens x 10 ms, then 4 more tokens x 100 ms
    assert first.ttft_ms == pytest.approx(1500.0)
    assert first.e2e_ms == pytest.approx(1900.0)
    # b waits for the only slot until a ends at 1.9 s: 1.7 s in the line, then 0.5 + 50 x 0.01
    assert second.queue_wait_s == pytest.approx(1.7)
    assert second.ttft_ms == pytest.approx((1.9 - 0.2 + 0.5 + 0.5) * 1000)
    assert second.e2e_ms == pytest.approx((3.1 - 0.2) * 1000)
    assert (first.prompt_tokens, first.output_tokens, second.output_tokens) == (100, 5, 3)
    assert duration == 100.0


def test_a_load_factor_stretches_every_step_and_the_overhead_by_itself() -> None:
    a = Scripted("a", [shape(("a-sys", 100), output=5, conversation="ca")])
    b = Scripted("b", [shape(("b-sys", 50), output=3, conversation="cb")], arrival_s=0.2)
    turns, _ = simulate(plan=plan(), costs=[replace(COST, load_factor=1.2)], students=[a, b])
    first, second = sorted(turns, key=lambda t: t.sent_s)
    assert first.ttft_ms == pytest.approx(1.2 * 1500.0)  # the one-slot case above, every time x1.2
    assert first.e2e_ms == pytest.approx(1.2 * 1900.0)
    assert second.queue_wait_s == pytest.approx(1.2 * 1.9 - 0.2)
    assert second.ttft_ms == pytest.approx((1.2 * 1.9 - 0.2 + 1.2 * (0.5 + 0.5)) * 1000)
    with pytest.raises(ValueError, match="load factor"):
        replace(COST, load_factor=0.0)


def test_a_later_turn_reuses_the_students_own_prefix_in_its_slot() -> None:
    a = Scripted("a", [shape(("sys", 100), output=2), shape(("sys", 100), ("tool", 30), output=2)], pauses=[1.0])
    turns, _ = simulate(plan=plan(), costs=[COST], students=[a])
    first, second = sorted(turns, key=lambda t: t.sent_s)
    assert (first.reused_prompt_tokens, second.reused_prompt_tokens) == (0, 100)
    assert second.ttft_ms == pytest.approx((0.5 + 30 * 0.01) * 1000)  # only the 30 new tokens are computed


def test_a_slot_last_used_by_a_classmate_is_recomputed_whole() -> None:
    """inference/admission/slot_owners: no reuse of a foreign prefix, even an identical one."""
    a = Scripted("a", [shape(("shared-system-prompt", 100), output=2, conversation="ca")])
    b = Scripted("b", [shape(("shared-system-prompt", 100), output=2, conversation="cb")], arrival_s=5.0)
    turns, _ = simulate(plan=plan(), costs=[COST], students=[a, b])
    assert [t.reused_prompt_tokens for t in sorted(turns, key=lambda t: t.sent_s)] == [0, 0]


def test_a_slot_file_brings_a_students_prefix_back_after_a_classmate_took_the_slot() -> None:
    """inference/admission/slot_files: b's turn saves a's prompt to a's file, a's next turn restores it (and
    only a's: b's identical system prompt is still computed whole). Off, a computes it again."""
    def students() -> list[Scripted]:
        a = Scripted("a", [shape(("sys", 100), output=2, conversation="ca"),
                           shape(("sys", 100), ("tool", 30), output=2, conversation="ca")], pauses=[10.0])
        b = Scripted("b", [shape(("sys", 100), output=2, conversation="cb")], arrival_s=5.0)
        return [a, b]

    def reused(**overrides: object) -> list[int]:
        turns, _ = simulate(plan=plan(**overrides), costs=[COST], students=students())
        return [t.reused_prompt_tokens for t in sorted(turns, key=lambda t: t.sent_s)]

    assert reused() == [0, 0, 100]  # a, b, a again: her prefix restored from her file
    assert reused(slot_files=False) == [0, 0, 0]


def test_a_system_prompt_is_shared_once_k_students_sent_it_restored_from_the_file_the_kth_saved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """inference/admission/shared_prefix (its prepare's rule, called): with k = 3 (students other
    than the requester), on one slot, the first three students compute their prompts whole; to the
    fourth the system prompt is public: it computes it whole too, saving the public part (a save
    task); the fifth restores it and finds all three blocks cached, and not a token of the others'
    questions. Off, nobody shares; with the rule changed by a monkeypatch of public_blocks to two
    senders, the second primes and the third restores."""
    from inference.admission import shared_prefix

    blocks = tuple((f"b{n}", (("sys", 100 * n),)) for n in (1, 2, 3))

    def students() -> list[Scripted]:
        return [Scripted(name, [TurnShape(segments=(("sys", 300), (f"q-{name}", 50)), prompt_bytes=1400,
                                          output_tokens=2, conversation=f"c{name}", shared=blocks)],
                         arrival_s=20.0 * number) for number, name in enumerate("abcde")]

    def reused(**overrides: object) -> list[int]:
        turns, _ = simulate(plan=plan(**overrides), costs=[COST], students=students())
        return [t.reused_prompt_tokens for t in sorted(turns, key=lambda t: t.sent_s)]

    assert reused(shared_prefix_k=3) == [0, 0, 0, 0, 300]
    assert reused() == [0, 0, 0, 0, 0]
    assert reused(shared_prefix_k=3, slot_files=False) == [0, 0, 0, 0, 0]  # the files are slot files
    monkeypatch.setattr(shared_prefix, "public_blocks", lambda counts, k: 3 if min(counts) >= 2 else 0)
    assert reused(shared_prefix_k=3) == [0, 0, 300, 300, 300]  # b primed it, c restores it


def test_a_question_in_the_light_lane_computes_its_prompt_instead_of_restoring_its_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """slot_owners.handover's lane rule, called by the simulator: a and b ask questions that both take
    the lane's slot 0; a's next question finds b's there and computes its prompt (no restore: on a
    busy worker the restore waits longer than the prompt takes). With the rule neutralised, a's
    file is restored, as outside the lane."""
    from inference.admission import slot_owners

    def students() -> list[Scripted]:
        a = Scripted("a", [shape(("sys", 100), output=2, conversation="ca"),
                           shape(("sys", 100), ("q2", 30), output=2, conversation="ca")], pauses=[10.0],
                     persona="chat")
        b = Scripted("b", [shape(("sys", 100), output=2, conversation="cb")], arrival_s=5.0, persona="chat")
        return [a, b]

    def reused() -> list[int]:
        turns, _ = simulate(plan=plan(slots=4, policy="tokens", light_lane_tokens=512), costs=[COST],
                            students=students())
        return [t.reused_prompt_tokens for t in sorted(turns, key=lambda t: t.sent_s)]

    assert reused() == [0, 0, 0]
    rule = slot_owners.handover
    monkeypatch.setattr(slot_owners, "handover", lambda previous, student, files, **_: rule(previous, student, files))
    assert reused() == [0, 0, 100]


def test_the_light_lane_keeps_slot_0_for_a_question_while_agents_hold_the_rest() -> None:
    """admission_rules.lane, called by the simulator: under "tokens", three agent turns take slots
    1-3 and a fourth waits although slot 0 is free; a question arriving later takes slot 0 at once.
    Under round-robin the fourth agent takes slot 0 and the question waits."""
    def students() -> list[Scripted]:
        agents = [Scripted(f"a{n}", [shape((f"a{n}", 1000), output=2, conversation=f"c{n}")]) for n in range(4)]
        return [*agents, Scripted("q", [shape(("q", 40), output=2, conversation="cq")], arrival_s=1.0, persona="chat")]

    def question_wait(policy: str) -> float:
        turns, _ = simulate(plan=plan(slots=4, policy=policy, light_lane_tokens=512), costs=[COST],
                            students=students())
        return next(t.queue_wait_s for t in turns if t.student == "q")

    assert question_wait("tokens") == 0.0
    assert question_wait("requests") > 5.0


def test_a_lane_worker_serves_the_question_at_once_and_never_an_agents_turn() -> None:
    """fleet.scheduler's lane rule and admission_rules.passes_lane, called by the simulator: two
    workers of one slot; without a lane, three agents' turns fill them and the question waits in
    the line behind the third; with worker 2 kept for short prompts, every agent turn runs on
    worker 1 (the third waits, the lane stays idle for it) and the question, behind it in the
    line (round-robin: arrival order between students served alike), takes worker 2 at once."""
    def run(lanes: int) -> list:  # noqa: ANN401
        agents = [Scripted(f"a{n}", [shape((f"a{n}", 1000), output=2, conversation=f"c{n}")],
                           arrival_s=0.1 * n) for n in range(3)]
        question = Scripted("q", [shape(("q", 40), output=2, conversation="cq")], arrival_s=1.0, persona="chat")
        turns, _ = simulate(plan=plan(workers=2, slots=1, lane_workers=lanes, lane_tokens=512, policy="requests"),
                            costs=[COST, COST], students=[*agents, question])
        return turns

    def question_of(turns: list) -> object:  # noqa: ANN401
        return next(t for t in turns if t.student == "q")

    without, kept = run(0), run(1)
    assert question_of(without).queue_wait_s > 5.0
    assert question_of(kept).queue_wait_s == 0.0 and question_of(kept).worker == "worker-2"
    assert {t.worker for t in kept if t.student != "q"} == {"worker-1"}
    assert sum(1 for t in kept if t.student != "q" and t.completed) == 3


def test_a_long_prompt_waits_for_its_workers_slot_and_a_classmate_takes_the_free_one() -> None:
    """admission_rules.affinity_hold, called by the simulator: a's second turn finds worker 1 (its
    prefix) busy with b and waits for it rather than computing 2,000 tokens on free worker 2;
    c, behind a in the line, takes worker 2 meanwhile. Without the hold a recomputes on worker 2."""
    def run(wait_s: float) -> dict[str, tuple[str, int]]:
        a = Scripted("a", [shape(("a-sys", 2000), output=2, conversation="ca"),
                           shape(("a-sys", 2000), ("tool", 10), output=2, conversation="ca")], pauses=[1.0])
        # b's long turn fills worker 1 (a's worker) while a thinks; c arrives behind a
        b = Scripted("b", [shape(("b", 400), output=40, conversation="cb")], arrival_s=21.0)
        c = Scripted("c", [shape(("c", 3000), output=2, conversation="cc")], arrival_s=21.7)
        turns, _ = simulate(plan=plan(workers=2, slots=1, affinity_wait_s=wait_s), costs=[COST, COST],
                            students=[a, b, c])
        return {f"{t.student}{n}": (t.worker, t.reused_prompt_tokens)
                for n, t in enumerate(sorted(turns, key=lambda t: t.sent_s))}

    held = run(30.0)  # keys: student and order of sending
    assert held["a2"] == ("worker-1", 2000)  # waited for its worker: its prefix was found
    assert held["c3"][0] == "worker-2" and held["b1"][0] == "worker-1"
    assert run(0.0)["a2"] == ("worker-2", 0)  # took the free worker and computed everything


def test_under_local_a_freed_slot_goes_to_the_student_whose_prefix_is_there_within_the_bound() -> None:
    """fair_share.order_local, called by the simulator's pump: e took a's slot on worker 1 while a
    thought; d (less served) and a then wait. When worker 1 frees, "tokens" gives it to d and a
    recomputes on worker 2 when b's turn ends; "local" gives it to a (its file is there) while a is
    within the bound of d; beyond the bound it is "tokens" again."""
    def run(policy: str, bound: float) -> dict[str, tuple[str, int]]:
        a = Scripted("a", [shape(("a-sys", 1000), output=2, conversation="ca"),
                           shape(("a-sys", 1000), ("tool", 10), output=2, conversation="ca")], pauses=[1.0])
        b = Scripted("b", [shape(("b", 3000), output=2, conversation="cb")], arrival_s=0.1)
        e = Scripted("e", [shape(("e", 1500), output=2, conversation="ce")], arrival_s=10.8)
        d = Scripted("d", [shape(("d", 500), output=2, conversation="cd")], arrival_s=11.0)
        turns, _ = simulate(plan=plan(workers=2, slots=1, policy=policy, local_bound=bound), costs=[COST, COST],
                            students=[a, b, e, d])
        return {f"{t.student}{n}": (t.worker, t.reused_prompt_tokens)
                for n, t in enumerate(sorted(turns, key=lambda t: t.sent_s))}

    tokens = run("tokens", 2000.0)  # keys: student and order of sending
    assert tokens["d3"][0] == "worker-1" and tokens["a4"] == ("worker-2", 0)
    local = run("local", 2000.0)
    assert local["a4"] == ("worker-1", 1000)
    assert run("local", 500.0) == tokens  # a is 1,008 above d: beyond a bound of 500


def test_decode_slows_with_the_batch_and_prompts_wait_for_the_decoding_slots() -> None:
    cost = CostModel(prefill_s_per_token=0.01, decode_s_per_token=0.1, decode_s_per_extra_slot=0.05,
                     request_overhead_s=0.0, batch_tokens=4096)
    a = Scripted("a", [shape(("a", 10), output=3, conversation="ca")])
    b = Scripted("b", [shape(("b", 10), output=3, conversation="cb")], arrival_s=0.05)
    turns, _ = simulate(plan=plan(slots=2), costs=[cost], students=[a, b])
    first, second = sorted(turns, key=lambda t: t.sent_s)
    # a: prompt step 0.1 s -> first token at 0.1; b (in at 0.05) joins the next step: a decodes (0.1) + b's 10
    # prompt tokens (0.1)
    assert first.first_token_s == pytest.approx(0.1)
    assert second.first_token_s == pytest.approx(0.3)
    # then both decode at once: 0.1 + 0.05 per step; a's last token one step later
    assert first.end_s == pytest.approx(0.45)
    assert second.end_s == pytest.approx(0.55)


def test_workers_that_share_compute_slow_each_other_only_while_both_compute() -> None:
    """Contention 1: a step runs at half speed while the other worker computes. a's 1-second
    prompt (alone) runs alone for 0.5 s, then beside b's: its other half takes 1 s, ending at 1.5;
    b's did half its work by then and ends alone 0.5 s later."""
    cost = CostModel(prefill_s_per_token=0.01, decode_s_per_token=0.1, request_overhead_s=0.0,
                     batch_tokens=4096, contention=1.0)
    a = Scripted("a", [shape(("a", 100), output=1, conversation="ca")])
    b = Scripted("b", [shape(("b", 100), output=1, conversation="cb")], arrival_s=0.5)
    turns, _ = simulate(plan=plan(workers=2), costs=[cost, cost], students=[a, b])
    first, second = sorted(turns, key=lambda t: t.sent_s)
    assert first.worker != second.worker
    assert first.first_token_s == pytest.approx(1.5)
    assert second.first_token_s == pytest.approx(2.0)
    # without contention each takes its 1 second; and one worker alone is never slowed
    free = CostModel(prefill_s_per_token=0.01, decode_s_per_token=0.1, request_overhead_s=0.0, batch_tokens=4096)
    a.sent, a.ended, b.sent, b.ended = 0, [], 0, []
    turns, _ = simulate(plan=plan(workers=2), costs=[free, free], students=[a, b])
    assert sorted(t.first_token_s for t in turns) == [pytest.approx(1.0), pytest.approx(1.5)]
    a.sent, a.ended = 0, []
    turns, _ = simulate(plan=plan(workers=1), costs=[cost], students=[a])
    assert turns[0].first_token_s == pytest.approx(1.0)


def test_a_handover_on_a_busy_worker_waits_a_step_boundary_for_its_slot_file_task() -> None:
    """The save of a's prompt (c takes a's slot) is a task of llama-server's loop: it runs when
    b's 10-second prompt step ends (11.0 s), and c's prompt, sent after it, joins the step after
    that one (11.1 s: b's first decode), not the one at 11.0 as without slot files. Measured on
    the demo: a save 0.25 s, a restore 0.10 s on average, seen by the gateway."""
    cost = CostModel(prefill_s_per_token=0.01, decode_s_per_token=0.1, request_overhead_s=0.0, batch_tokens=4096)

    def run(slot_files: bool) -> dict:
        a = Scripted("a", [shape(("a", 100), output=1, conversation="ca")], pauses=[100.0])
        b = Scripted("b", [shape(("b", 1000), output=3, conversation="cb")], arrival_s=0.5)
        c = Scripted("c", [shape(("c", 100), output=1, conversation="cc")], arrival_s=2.0)
        turns, _ = simulate(plan=plan(slots=2, slot_files=slot_files), costs=[cost], students=[a, b, c])
        return {t.student: t for t in turns}

    with_files, without = run(True), run(False)
    assert with_files["b"].first_token_s == pytest.approx(11.0) == without["b"].first_token_s
    assert without["c"].first_token_s == pytest.approx(11.0 + 0.1 + 1.0)
    assert with_files["c"].first_token_s == pytest.approx(11.1 + 0.1 + 1.0)


def test_a_slot_file_task_holds_the_loop_for_its_files_size() -> None:
    """A save or restore runs in llama-server's loop thread (CostModel.slot_save_s_per_token,
    slot_restore_s_per_token): b's turn takes a's slot after a's 100 tokens are saved (0.2 s), and
    a's next turn waits for b's 50 tokens to be saved (0.1 s), then for her own 100 to be read back
    (0.05 s), one after the other, before her 20 new tokens are computed."""
    cost = CostModel(prefill_s_per_token=0.01, decode_s_per_token=0.1, request_overhead_s=0.0, batch_tokens=4096)

    def run(costed: CostModel) -> dict:
        a = Scripted("a", [shape(("a", 100), output=1, conversation="ca"),
                           shape(("a", 100), ("tool", 20), output=1, conversation="ca")], pauses=[9.0])
        b = Scripted("b", [shape(("b", 50), output=1, conversation="cb")], arrival_s=5.0)
        turns, _ = simulate(plan=plan(), costs=[costed], students=[a, b])
        return {(t.student, round(t.sent_s)): t for t in turns}

    free = run(cost)
    timed = run(replace(cost, slot_save_s_per_token=0.002, slot_restore_s_per_token=0.0005))
    assert free[("b", 5)].first_token_s == pytest.approx(5.5)
    assert timed[("b", 5)].first_token_s == pytest.approx(5.0 + 0.2 + 0.5)
    assert free[("a", 10)].first_token_s == pytest.approx(10.0 + 0.2)
    assert timed[("a", 10)].first_token_s == pytest.approx(10.0 + 0.1 + 0.05 + 0.2)
    assert timed[("a", 10)].reused_prompt_tokens == 100  # her file, restored


def test_handovers_claimed_together_on_an_idle_worker_reach_its_loop_one_by_one() -> None:
    """Two slots freed together and refilled together (c and d take a's and b's): with free slot
    files both prompts reach the idle loop at once and share a step; with each save taking 0.1 s,
    the saves run one after the other, c's prompt starts a step alone when the second save is done
    and d's joins the step after it: the loop stops moving its slots in lockstep, as llama-server's
    did in the sixteenth pass (docs/research/planner-validation.md)."""
    cost = CostModel(prefill_s_per_token=0.01, decode_s_per_token=0.1, request_overhead_s=0.0, batch_tokens=4096)

    def run(costed: CostModel) -> dict:
        students = [Scripted(name, [shape((name, 100), output=1, conversation=f"c{name}")], arrival_s=arrival)
                    for name, arrival in (("a", 0.0), ("b", 0.0), ("c", 5.0), ("d", 5.0))]
        turns, _ = simulate(plan=plan(slots=2), costs=[costed], students=students)
        return {t.student: t.first_token_s for t in turns}

    free = run(cost)
    timed = run(replace(cost, slot_save_s_per_token=0.001))
    assert free["c"] == pytest.approx(7.0) == free["d"]
    assert sorted([timed["c"], timed["d"]]) == [pytest.approx(5.2 + 1.0), pytest.approx(6.2 + 1.0)]


def test_requests_reaching_an_idle_worker_at_one_instant_share_its_first_batch() -> None:
    """llama-server builds a batch from every task queued when its loop turns: two prompts that
    arrive together at an idle worker are evaluated together, the short one waiting for the long
    one (found by the predict-then-measure check, docs/research/planner-validation.md)."""
    long = Scripted("long", [shape(("l", 100), output=2, conversation="cl")])
    short = Scripted("short", [shape(("s", 10), output=2, conversation="cs")])
    for order in ([long, short], [short, long]):
        turns, _ = simulate(plan=plan(slots=2), costs=[COST], students=order)
        # both in at 0.5 s (the overhead), one step of 110 prompt tokens: first tokens at 0.5 + 1.1 s
        assert sorted(t.first_token_s for t in turns) == [pytest.approx(1.6), pytest.approx(1.6)]
        for student in order:
            student.sent, student.ended = 0, []


def test_the_simulator_costs_a_step_as_its_forward_passes() -> None:
    """The same two prompts on a worker whose passes cost something of their own: 100 and 10
    tokens on slots 0 and 1 run as two passes (10 tokens of each, then slot 0's other 90), so the
    step costs one pass more than its tokens (cost.ubatches, measured in passes-probe.txt)."""
    long = Scripted("long", [shape(("l", 100), output=2, conversation="cl")])
    short = Scripted("short", [shape(("s", 10), output=2, conversation="cs")])
    turns, _ = simulate(plan=plan(slots=2), costs=[replace(COST, pass_s=0.2)], students=[long, short])
    assert sorted(t.first_token_s for t in turns) == [pytest.approx(1.8), pytest.approx(1.8)]


def test_a_request_that_waits_past_the_maximum_is_refused_with_the_gateways_retry_after() -> None:
    a = Scripted("a", [shape(("a", 100), output=50, conversation="ca")])  # holds the slot 0.5 + 1 + 4.9 s
    b = Scripted("b", [shape(("b", 10), output=2, conversation="cb")], arrival_s=1.0)
    turns, _ = simulate(plan=plan(max_wait_s=2.0, slot_lease_s=30.0), costs=[COST], students=[a, b])
    refused = [t for t in turns if not t.completed]
    assert [(t.student, t.refused_reason, t.end_s) for t in refused] == [("b", "queue_timeout", 3.0)]
    assert b.ended[0] == (False, 10)  # admission_rules.queue_timeout_retry_after_s(30): a third of a lease
    assert [t.student for t in turns if t.completed] == ["a", "b"]  # b sent it again after its pause


def test_no_turn_is_sent_after_the_duration_and_turns_in_flight_finish() -> None:
    a = Scripted("a", [shape(("a", 100), output=2), shape(("b", 100), output=2)], pauses=[0.0])
    turns, duration = simulate(plan=plan(duration_s=1.0), costs=[COST], students=[a])
    assert len(turns) == 1 and turns[0].end_s == pytest.approx(1.6)
    assert duration == pytest.approx(1.6)


def test_the_token_fair_rule_serves_the_lighter_student_first_and_round_robin_the_earlier() -> None:
    h = Scripted("h", [shape(("h1", 1000), output=2, conversation="h1"),
                       shape(("h2", 100), output=2, conversation="h2")], pauses=[0.0])
    x = Scripted("x", [shape(("x", 2000), output=2, conversation="x")], arrival_s=10.65)
    light = Scripted("l", [shape(("l", 10), output=2, conversation="l")], arrival_s=10.7)

    def order(policy: str) -> list[str]:
        for student in (h, x, light):
            student.sent, student.ended = 0, []
        turns, _ = simulate(plan=plan(policy=policy), costs=[COST], students=[h, x, light])
        return [t.student for t in sorted(turns, key=lambda t: t.first_token_s or 0)]

    # h's first turn (0.5 + 1000 x 0.01 + 0.1) ends at 10.6 and h sends again at once, before x (10.65) and l
    # (10.7) arrive, so h takes the slot; then x and l wait.
    assert order("requests")[:2] == ["h", "h"]
    tokens, requests = order("tokens"), order("requests")
    # while h's second turn runs, x (2,000 tokens, earlier) and l (10 tokens, later) wait
    assert requests[2:] == ["x", "l"]  # round-robin: equal counters, the earlier arrival
    assert tokens[2:] == ["l", "x"]  # tokens: lifted level, the cheaper request first


def test_changing_the_fair_rule_in_core_changes_the_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    x = Scripted("x", [shape(("x", 2000), output=2, conversation="x")], arrival_s=0.1)
    light = Scripted("l", [shape(("l", 10), output=2, conversation="l")], arrival_s=0.2)
    first = Scripted("f", [shape(("f", 100), output=2, conversation="f")])

    def order() -> list[str]:
        for student in (x, light, first):
            student.sent, student.ended = 0, []
        turns, _ = simulate(plan=plan(policy="tokens"), costs=[COST], students=[first, x, light])
        return [t.student for t in sorted(turns, key=lambda t: t.first_token_s or 0)]

    assert order() == ["f", "l", "x"]
    # the pump walks the line in fair_share.order (pick is its head)
    monkeypatch.setattr(fair_share, "order", lambda waiting, counters: sorted(waiting, key=lambda w: -w.cost))
    assert order() == ["f", "x", "l"]


def test_changing_the_schedulers_ranking_changes_which_worker_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    def workers() -> list[str]:
        a = Scripted("a", [shape(("a", 10), output=2, conversation="ca")])
        turns, _ = simulate(plan=plan(workers=2), costs=[COST, COST], students=[a])
        return [t.worker for t in turns]

    assert workers() == ["worker-1"]  # equal load: the scheduler's name order
    production = scheduler.rank_workers

    def reversed_ranking(**kwargs: object) -> scheduler.Decision:
        decision = production(**kwargs)  # type: ignore[arg-type]
        return scheduler.Decision(ranked=list(reversed(decision.ranked)), excluded=decision.excluded)

    monkeypatch.setattr(scheduler, "rank_workers", reversed_ranking)
    assert workers() == ["worker-2"]


def test_a_conversation_returns_to_the_worker_that_served_it_even_when_another_is_idle() -> None:
    """fleet.scheduler's affinity: the second turn goes back to worker-1 (its cache), though
    worker-1 is busier than worker-2 at that moment."""
    a = Scripted("a", [shape(("a", 100), output=2, conversation="ca"),
                       shape(("a", 100), ("t", 10), output=2, conversation="ca")], pauses=[1.0])
    b = Scripted("b", [shape(("b", 10), output=2, conversation="cb")], arrival_s=0.1)  # lands on worker-2
    c = Scripted("c", [shape(("c", 5000), output=2, conversation="cc")], arrival_s=1.7)  # worker-1, 2nd slot
    turns, _ = simulate(plan=plan(workers=2, slots=2), costs=[COST, COST], students=[a, b, c])
    second = [t for t in turns if t.student == "a"][1]
    assert second.worker == "worker-1" and second.reused_prompt_tokens == 100


def test_cached_prefix_counts_leading_equal_segments_only() -> None:
    held = (("s", 100), ("u1", 20), ("a1", 30))
    assert cached_prefix_tokens(held, (("s", 100), ("u1", 20), ("a1", 30), ("t", 5))) == 150
    assert cached_prefix_tokens(held, (("s", 100), ("u2", 20), ("a1", 30))) == 100
    assert cached_prefix_tokens((), (("s", 100),)) == 0


def test_a_student_back_from_a_pause_is_lifted_level_with_those_waiting_not_ahead_of_them() -> None:
    """inference.admission.fair_share.lifted: l (no service yet) joins while w (some service) waits; lifted to w's
    counter, the tie goes to the cheaper request (w's). Without the lift l's banked 0 would win."""
    f = Scripted("f", [shape(("f", 100), output=2, conversation="f")])
    w = Scripted("w", [shape(("w1", 10), output=2, conversation="w"), shape(("w2", 20), output=2, conversation="w2")],
                 arrival_s=0.01, pauses=[0.0])
    x = Scripted("x", [shape(("x", 500), output=2, conversation="x")], arrival_s=2.2)
    late = Scripted("l", [shape(("l", 200), output=2, conversation="l")], arrival_s=3.0)
    turns, _ = simulate(plan=plan(policy="tokens"), costs=[COST], students=[f, w, x, late])
    assert [t.student for t in sorted(turns, key=lambda t: t.first_token_s or 0)] == ["f", "w", "x", "w", "l"]


def test_a_prompt_chunk_costs_more_the_more_context_is_already_in_the_slot() -> None:
    """One slot, 0.5 s overhead, 0.01 s a token, 0.0001 s per (new token, token before it).
    Turn 1: 100 tokens after none; turn 2 finds those 100 cached and computes 10 after them."""
    cost = CostModel(prefill_s_per_token=0.01, prefill_s_per_context_token=1e-4, decode_s_per_token=0.1,
                     request_overhead_s=0.5, batch_tokens=4096)
    first = shape(("sys", 100), output=1, conversation="ca")
    second = shape(("sys", 100), ("q2", 10), output=1, conversation="ca")
    a = Scripted("a", [first, second], pauses=[1.0])
    turns, _ = simulate(plan=plan(), costs=[cost], students=[a])
    one, two = turns
    assert one.ttft_ms == pytest.approx((0.5 + 100 * 0.01 + 1e-4 * 100 * 99 / 2) * 1000)
    assert two.reused_prompt_tokens == 100
    assert two.ttft_ms == pytest.approx((0.5 + 10 * 0.01 + 1e-4 * 10 * (100 + 9 / 2)) * 1000)


def test_a_small_chunks_first_tokens_pay_the_small_chunk_cost_per_token_cached_before_it() -> None:
    """The CPU worker's measured shape: a chunk's first `small_chunk_tokens` tokens read the tokens
    cached before it at an extra cost. Turn 2 finds 100 cached and computes 10: 4 of them pay it."""
    cost = CostModel(prefill_s_per_token=0.01, prefill_s_per_context_token=1e-4, decode_s_per_token=0.1,
                     request_overhead_s=0.5, batch_tokens=4096, small_chunk_tokens=4,
                     small_chunk_s_per_context_token=1e-3)
    a = Scripted("a", [shape(("sys", 100), output=1, conversation="ca"),
                       shape(("sys", 100), ("q2", 10), output=1, conversation="ca")], pauses=[1.0])
    one, two = simulate(plan=plan(), costs=[cost], students=[a])[0]
    assert one.ttft_ms == pytest.approx((0.5 + 100 * 0.01 + 1e-4 * 100 * 99 / 2) * 1000)  # nothing cached before
    assert two.ttft_ms == pytest.approx((0.5 + 10 * 0.01 + 1e-4 * 10 * (100 + 9 / 2) + 1e-3 * 4 * 100) * 1000)
    assert two.ttft_ms == pytest.approx(cost.ttft_alone_s(10, 100) * 1000)


def test_a_prompt_split_over_batches_pays_for_the_chunks_before_it() -> None:
    """A 6-token batch: 10 prompt tokens go as 6 then 4; the second chunk sits after 6 tokens."""
    cost = CostModel(prefill_s_per_token=0.01, prefill_s_per_context_token=1e-3, decode_s_per_token=0.1,
                     batch_tokens=6)
    a = Scripted("a", [shape(("p", 10), output=1)])
    (turn,), _ = simulate(plan=plan(), costs=[cost], students=[a])
    expected = 10 * 0.01 + 1e-3 * (6 * 5 / 2) + 1e-3 * 4 * (6 + 3 / 2)
    assert turn.ttft_ms == pytest.approx(expected * 1000)


def test_the_answer_a_slot_generated_is_found_cached_when_the_next_prompt_carries_it_back() -> None:
    """The slot holds prompt + answer but the answer's last token (sampled, never evaluated: a
    measured 9-token answer came back with 8 of its tokens cached): a next prompt of [sys, the
    answer, a tool result] computes that last token and the tool result only."""
    first = TurnShape(segments=(("sys", 100),), prompt_bytes=400, output_tokens=5, conversation="ca",
                      answer_key="answer-1")
    second = shape(("sys", 100), ("answer-1", 5), ("tool", 20), output=5, conversation="ca")
    a = Scripted("a", [first, second], pauses=[1.0])
    one, two = simulate(plan=plan(), costs=[COST], students=[a])[0]
    assert two.reused_prompt_tokens == 104
    assert two.ttft_ms == pytest.approx((0.5 + 21 * 0.01) * 1000)
    # without the key the answer is computed again
    b = Scripted("b", [shape(("sys", 100), output=5, conversation="cb"), second], pauses=[1.0])
    assert simulate(plan=plan(), costs=[COST], students=[b])[0][1].reused_prompt_tokens == 100
