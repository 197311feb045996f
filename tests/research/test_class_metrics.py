"""The class replay's numbers on hand-made turns: percentiles, Jain's index per 10 s window over
waiting students, cache hit rate, refusals. Pure: no database, no server."""
from __future__ import annotations

import pytest

from inference.admission import fair_share

from research.class_metrics import (Turn, Weights, aggregate, busy_seconds, class_report, jain, jain_index,
                                    jain_windows, parse_weights, processor_sharing, service_parts, turn_from_row,
                                    turn_row, under_load)

pytestmark = pytest.mark.backend_neutral  # pure: no database, no live state


def turn(student: str, persona: str, sent: float, first: float | None, end: float, *, prompt: int = 100,
         reused: int = 0, output: int = 10, completed: bool = True, reason: str = "", wait: float = 0.0,
         worker: str = "w1") -> Turn:
    return Turn(student=student, persona=persona, sent_s=sent, first_token_s=first, end_s=end, completed=completed,
                refused_reason=reason, prompt_tokens=prompt, reused_prompt_tokens=reused, output_tokens=output,
                queue_wait_s=wait, worker=worker)


def test_jain_is_one_when_even_and_one_over_n_when_one_takes_all() -> None:
    assert jain([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain([9, 0, 0]) == pytest.approx(1 / 3)
    assert jain([0, 0]) is None and jain([]) is None


def test_service_is_computed_prompt_then_output_weighted() -> None:
    one = turn("a", "agent", 0.0, 4.0, 6.0, prompt=1000, reused=800, output=50, wait=1.0)
    assert service_parts(one, Weights(prompt_token=1, output_token=2)) == [(1.0, 4.0, 200.0), (4.0, 6.0, 100.0)]
    # a student's own weight divides what they received (a weight-2 student may take twice as much)
    assert service_parts(one, Weights(students={"a": 2.0}))[0][2] == 100.0
    refused = turn("a", "agent", 0.0, None, 1.0, completed=False, reason="queue_timeout")
    assert service_parts(refused, Weights()) == []


def test_a_window_counts_students_waiting_in_it_even_if_they_received_nothing() -> None:
    # b waits the whole first window and is served only in the second: window 0 is unfair
    turns = [turn("a", "agent", 0.0, 1.0, 9.0, prompt=100, output=100),
             turn("b", "chat", 0.0, 12.0, 14.0, prompt=100, output=100, wait=11.0)]
    windows = jain_windows(turns, Weights(prompt_token=1, output_token=1), duration_s=20)
    assert [w["students"] for w in windows] == [2, 1]
    assert windows[0]["jain"] == pytest.approx(0.5)  # all of window 0's service went to a
    assert windows[1]["jain"] is None  # one student: not counted
    assert jain_index(windows) == pytest.approx(0.5)


def test_service_is_split_across_windows_by_time() -> None:
    turns = [turn("a", "agent", 0.0, 0.0, 20.0, prompt=0, output=200),
             turn("b", "agent", 0.0, 0.0, 20.0, prompt=0, output=200)]
    windows = jain_windows(turns, Weights(output_token=1), duration_s=20)
    assert [round(w["service"]["a"]) for w in windows] == [100, 100]
    assert jain_index(windows) == pytest.approx(1.0)


def test_percentiles_refusals_and_cache_per_student() -> None:
    turns = [turn("a", "agent", 0, 0.1 * i + 0.1, 1 + i, prompt=1000, reused=500 if i else 0) for i in range(5)]
    turns.append(turn("a", "agent", 9, None, 10, completed=False, reason="queue_timeout"))
    row = aggregate(turns, Weights())
    assert row["completed"] == 5 and row["refused"] == 1 and row["refused_reasons"] == {"queue_timeout": 1}
    assert row["ttft_ms"]["p50"] == pytest.approx(300.0) and row["ttft_ms"]["p95"] == pytest.approx(480.0)
    assert row["prompt_tokens"] == 5000 and row["reused_prompt_tokens"] == 2000
    assert row["computed_prompt_tokens"] == 3000 and row["cache_hit_rate"] == pytest.approx(0.4)


def test_the_report_has_every_student_persona_and_key() -> None:
    turns = [turn("s1", "agent", 0, 2, 5, prompt=1000, reused=600, output=40),
             turn("s2", "chat", 1, 3, 4, prompt=50, reused=0, output=20, worker="w2"),
             turn("s2", "chat", 6, None, 7, completed=False, reason="concurrency")]
    report = class_report(turns, duration_s=10.0, weights=Weights(), roster=[("s1", "agent"), ("s2", "chat"),
                                                                              ("s3", "burst")],
                          workers=["w1", "w2"])
    assert [r["student"] for r in report["per_student"]] == ["s1", "s2", "s3"]
    assert report["per_student"][2]["completed"] == 0  # in the roster, never got a turn in
    assert set(report["per_persona"]) == {"agent", "chat", "burst"}
    assert report["per_persona"]["chat"]["refused_reasons"] == {"concurrency": 1}
    assert report["cache_hit_rate"] == pytest.approx(600 / 1050)
    assert report["tokens_per_s_per_worker"] == pytest.approx(60 / 10 / 2)
    assert report["tokens_per_s_by_worker"]["w2"]["turns"] == 1
    shares = [r["service_share"] for r in report["per_student"][:2]]
    assert sum(shares) == pytest.approx(1.0)


def test_agents_pool_the_agent_personas_turns_as_one_persona() -> None:
    # two agent personas' turns together: the percentiles are over the pooled turns, not a mean of
    # the personas' percentiles; chat and refused turns are not in the TTFT figures
    turns = [turn("a1", "agent", 0, 1, 5), turn("a1", "agent", 10, 12, 15), turn("c1", "claude", 0, 3, 6),
             turn("c1", "claude", 20, 24, 26), turn("c1", "claude", 30, None, 31, completed=False,
                                                    reason="queue_timeout"),
             turn("h1", "chat", 0, 10, 11)]
    report = class_report(turns, duration_s=40.0, weights=Weights(),
                          roster=[("a1", "agent"), ("c1", "claude"), ("h1", "chat"), ("x1", "codex")])
    agents = report["agents"]
    assert agents["students"] == 3 and agents["completed"] == 4 and agents["refused"] == 1
    assert agents["ttft_ms"]["p50"] == pytest.approx(2500.0)  # of 1, 2, 3, 4 s
    assert agents["ttft_ms"]["p95"] == pytest.approx(3850.0)


def test_chat_under_load_needs_three_agents_and_a_burst_running() -> None:
    busy = [turn(f"a{i}", "agent", 0, 5, 20) for i in range(3)] + [turn("b", "burst", 0, 5, 20)]
    loaded = turn("c", "chat", 10, 11, 12)
    alone = turn("c", "chat", 30, 31, 32)
    assert under_load([*busy, loaded, alone]) == [loaded]


def test_weights_parse_and_refuse_nonsense() -> None:
    assert parse_weights("prompt:1,output:4") == Weights(prompt_token=1, output_token=4)
    # Left out: what the fair-sharing rule charges, so the index weighs service as the scheduler does.
    assert parse_weights("") == Weights() == Weights(prompt_token=fair_share.PROMPT_TOKEN_COST,
                                                     output_token=fair_share.OUTPUT_TOKEN_COST)
    assert parse_weights("output:2") == Weights(prompt_token=fair_share.PROMPT_TOKEN_COST, output_token=2)
    for bad in ("prompt", "decode:1", "output:x", "output:-1"):
        with pytest.raises(ValueError):
            parse_weights(bad)


def test_the_rate_index_does_not_punish_a_short_question_answered_at_once() -> None:
    # a runs all window on a long turn; b's short question is answered in 1 s, then b thinks
    turns = [turn("a", "agent", 0.0, 0.0, 10.0, prompt=0, output=1000),
             turn("b", "chat", 2.0, 2.0, 3.0, prompt=0, output=100)]
    windows = jain_windows(turns, Weights(output_token=1), duration_s=10)
    assert windows[0]["jain"] < 0.7  # by service received: b looks starved
    assert windows[0]["jain_rate"] == pytest.approx(1.0)  # 100 tokens/s each while waiting
    # left waiting 9 s for the same answer, b scores low on both
    slow = [turns[0], turn("b", "chat", 0.5, 9.5, 10.0, prompt=0, output=100, wait=9.0)]
    assert jain_windows(slow, Weights(output_token=1), duration_s=10)[0]["jain_rate"] < 0.7


def test_a_stored_turn_comes_back_the_same() -> None:
    one = turn("a", "agent", 1.5, 2.25, 4.0, prompt=900, reused=600, output=12, wait=0.5)
    back = turn_from_row(turn_row(one))
    assert back == one


ONE_EACH = Weights(prompt_token=1, output_token=1)


def test_busy_seconds_count_overlapping_turns_once() -> None:
    turns = [turn("a", "agent", 0.0, 1.0, 4.0), turn("b", "chat", 2.0, 3.0, 5.0), turn("c", "chat", 8.0, 8.5, 9.0)]
    assert busy_seconds(turns) == pytest.approx(6.0)  # [0, 5] and [8, 9]


def test_the_ideal_server_shares_its_rate_among_the_students_in_hand() -> None:
    # measured: 400 tokens of work in 4 busy seconds, so the ideal serves 100 a second; a (100) and
    # b (300) share it 50/50 until a is done at 2 s, then b has it all and ends at 4 s
    turns = [turn("a", "agent", 0.0, 3.0, 4.0, prompt=100, output=0), turn("b", "agent", 0.0, 3.5, 4.0, prompt=300,
                                                                            output=0)]
    ideal, rate = processor_sharing(turns, ONE_EACH)
    assert rate == pytest.approx(100.0)
    assert [(t.student, t.first_token_s, t.end_s, t.queue_wait_s) for t in ideal] == [
        ("a", pytest.approx(2.0), pytest.approx(2.0), 0.0), ("b", pytest.approx(4.0), pytest.approx(4.0), 0.0)]


def test_the_ideal_server_serves_a_students_turns_in_order_prompt_before_output() -> None:
    # a sends twice (the second before the first is answered): the second starts when the first ends;
    # each first token comes when its prompt part is done
    turns = [turn("a", "agent", 0.0, 0.5, 1.0, prompt=50, output=50), turn("a", "agent", 0.5, 1.5, 2.0, prompt=50,
                                                                            output=50)]
    ideal, rate = processor_sharing(turns, ONE_EACH)
    assert rate == pytest.approx(100.0)
    first, second = ideal
    assert (first.first_token_s, first.end_s) == (pytest.approx(0.5), pytest.approx(1.0))
    assert second.queue_wait_s == pytest.approx(0.5)  # sent at 0.5, started at 1.0
    assert (second.first_token_s, second.end_s) == (pytest.approx(1.5), pytest.approx(2.0))


def test_the_ideal_server_follows_the_class_weights_and_leaves_refused_turns_out() -> None:
    turns = [turn("a", "agent", 0.0, 1.0, 3.0, prompt=200, output=0), turn("b", "agent", 0.0, 1.0, 3.0, prompt=100,
                                                                            output=0),
             turn("c", "chat", 0.0, None, 3.0, completed=False, reason="queue_timeout")]
    ideal, _ = processor_sharing(turns, Weights(prompt_token=1, output_token=1, students={"a": 2.0}))
    assert [t.student for t in ideal] == ["a", "b"]
    # 100 a second, two thirds to a: both finish together at 3 s, a having received twice b's service
    assert [t.end_s for t in ideal] == [pytest.approx(3.0), pytest.approx(3.0)]
    assert processor_sharing([], ONE_EACH) == ([], 0.0)


def test_even_the_ideal_server_scores_below_one_when_students_are_in_hand_for_different_times() -> None:
    # an agent computing all window and a classmate asking a short question at 2 s, then thinking:
    # the ideal serves the question at once at half the rate, yet the plain index sees the agent
    # "receive more"; the rate index (service per second in hand) sees the ideal as nearly even (the
    # agent, alone for 8 of its 10 s, had the whole rate then: 90 a second against the question's 50)
    turns = [turn("a", "agent", 0.0, 9.0, 10.0, prompt=900, output=0), turn("b", "chat", 2.0, 2.5, 3.0, prompt=100,
                                                                             output=0)]
    report = class_report(turns, duration_s=10.0, weights=ONE_EACH, roster=[("a", "agent"), ("b", "chat")])
    ideal = report["jain_ideal"]
    assert ideal["service_per_s"] == pytest.approx(100.0)
    assert ideal["jain_index"] < 0.7
    assert ideal["jain_index_per_backlogged_s"] == pytest.approx(140 ** 2 / (2 * (90 ** 2 + 50 ** 2)))
    # fairness is judged against that ideal, on the same turns: the measured rate index over the ideal's
    against = report["jain_vs_ideal"]
    assert against["ideal_per_s_in_hand"] == ideal["jain_index_per_backlogged_s"]
    assert against["per_s_in_hand"] == report["jain_index_per_backlogged_s"]
    assert against["ratio"] == pytest.approx(against["per_s_in_hand"] / against["ideal_per_s_in_hand"])


def test_the_report_says_whether_a_gap_is_who_holds_a_slot_or_what_a_held_slot_gives() -> None:
    """Two students in hand all window, each holding a slot all along: who holds is even (1.0)
    though one slot prefills 900 tokens and the other decodes 10: the gap is service per held
    second. A third student waiting 8 of 10 s in the line, then served, holds a slot 20 % of
    their time in hand: that part of a gap is the line and the slots."""
    a = turn("a", "agent", 0.0, 9.9, 10.0, prompt=900, output=0)
    b = turn("b", "chat", 0.0, 0.1, 10.0, prompt=0, output=10)
    even = class_report([a, b], duration_s=10.0, weights=ONE_EACH, roster=[("a", "agent"), ("b", "chat")])
    assert even["jain_vs_ideal"]["held_share"] == pytest.approx(1.0)
    assert even["jain_vs_ideal"]["per_held_s"] < 0.6
    c = turn("c", "agent", 0.0, 9.0, 10.0, prompt=100, output=0, wait=8.0)
    waited = class_report([a, c], duration_s=10.0, weights=ONE_EACH, roster=[("a", "agent"), ("c", "agent")])
    assert waited["jain_vs_ideal"]["held_share"] == pytest.approx(1.2 ** 2 / (2 * (1 + 0.2 ** 2)))
