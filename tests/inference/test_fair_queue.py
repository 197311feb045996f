from __future__ import annotations

from inference.fair_queue import FairQueue


def test_a_burst_from_one_student_does_not_starve_a_classmate() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(20):
        queue.push("alice", f"a{i}")
    queue.push("bob", "b0")
    served = [queue.pop() for _ in range(21)]
    assert served.index("b0") == 1  # right after alice's first request
    assert [s for s in served if s.startswith("a")] == [f"a{i}" for i in range(20)]  # alice keeps her order
    assert queue.pop() is None and len(queue) == 0


def test_round_robin_over_three_students_and_late_arrivals_join_the_round() -> None:
    queue: FairQueue[str] = FairQueue()
    for item in ["a1", "a2", "a3", "b1", "b2", "c1"]:
        queue.push(item[0], item)
    assert [queue.pop(), queue.pop(), queue.pop()] == ["a1", "b1", "c1"]
    queue.push("d", "d1")
    assert [queue.pop(), queue.pop(), queue.pop(), queue.pop()] == ["a2", "b2", "d1", "a3"]


def test_remove_takes_a_waiter_out_and_peek_matches_pop() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", "a1")
    queue.push("b", "b1")
    assert queue.remove("a", "a1") and not queue.remove("a", "a1")
    assert queue.peek() == "b1" == queue.pop()
    assert len(queue) == 0 and queue.students() == 0


def test_take_removes_that_very_item_and_sends_its_student_to_the_back() -> None:
    queue: FairQueue[str] = FairQueue()
    for item in ["a1", "a2", "b1", "c1"]:
        queue.push(item[0], item)
    assert queue.take("b", "b1") and not queue.take("b", "b1")
    assert queue.take("a", "a1")  # a served: a goes behind c
    assert [queue.pop(), queue.pop()] == ["c1", "a2"] and len(queue) == 0
