from __future__ import annotations

from fleet.hysteresis import HealthTracker, Observation

OK = Observation(ok=True, detail="200")
FAIL = Observation(ok=False, detail="connection refused")
LOADING = Observation(ok=False, detail="503 loading", loading=True)


def run(tracker: HealthTracker, state: str, observations: list[Observation], worker_id: int = 1) -> list[str]:
    states = []
    for observation in observations:
        state = tracker.observe(worker_id, state, observation) or state
        states.append(state)
    return states


def test_a_dead_worker_goes_degraded_then_down_after_two_failures() -> None:
    assert run(HealthTracker(), "healthy", [FAIL, FAIL, FAIL]) == ["degraded", "down", "down"]


def test_one_blip_degrades_but_a_success_streak_restores() -> None:
    assert run(HealthTracker(), "healthy", [FAIL, OK, OK, OK]) == ["degraded", "degraded", "healthy", "healthy"]


def test_a_down_worker_needs_two_successes_in_a_row_to_serve_again() -> None:
    assert run(HealthTracker(), "down", [OK, FAIL, OK, OK]) == ["down", "down", "down", "healthy"]


def test_a_starting_worker_is_healthy_on_its_first_success_and_may_load_for_long() -> None:
    assert run(HealthTracker(), "starting", [LOADING] * 10 + [OK]) == ["starting"] * 10 + ["healthy"]
    assert run(HealthTracker(), "starting", [FAIL, FAIL], worker_id=2) == ["starting", "down"]


def test_teacher_states_are_never_changed_by_observations() -> None:
    tracker = HealthTracker()
    assert run(tracker, "draining", [OK, OK, FAIL, FAIL]) == ["draining"] * 4
    assert run(tracker, "disabled", [OK, OK, OK], worker_id=2) == ["disabled"] * 3


def test_streaks_are_per_worker() -> None:
    tracker = HealthTracker()
    tracker.observe(1, "healthy", FAIL)
    assert tracker.observe(2, "healthy", FAIL) == "degraded"  # worker 2's first failure, not 1's second
    assert tracker.observe(1, "degraded", FAIL) == "down"


def test_a_serving_worker_that_answers_loading_has_restarted_and_is_starting_again() -> None:
    for state in ["healthy", "degraded", "down"]:
        assert run(HealthTracker(), state, [LOADING, LOADING, OK]) == ["starting", "starting", "healthy"], state


def test_a_worker_registered_again_is_not_charged_the_failures_of_the_process_that_died() -> None:
    """Its old process failed one probe (degraded); the new one registers (starting) and its port is
    not open yet: one failure of its own, not the second in a row that marks a worker down."""
    tracker = HealthTracker()
    assert run(tracker, "healthy", [FAIL]) == ["degraded"]
    assert run(tracker, "starting", [FAIL, FAIL]) == ["starting", "down"]
