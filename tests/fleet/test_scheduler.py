from __future__ import annotations

from fleet.scheduler import WorkerView, rank_workers, serves_model

PROD, DEV = 1, 2
MODEL = "smollm2"


def w(id: int, *, pool: int = PROD, model: str = MODEL, slots: int = 4, state: str = "healthy",
      name: str | None = None) -> WorkerView:
    return WorkerView(id=id, name=name or f"w{id}", base_url=f"http://10.0.0.{id}:8080", pool_id=pool,
                      pool_name="production" if pool == PROD else "dev", model_id=model, slots=slots, state=state)


def names(decision) -> list[str]:  # noqa: ANN001
    return [c.worker.name for c in decision.ranked]


def test_only_workers_of_the_keys_pool_serving_the_model_are_candidates() -> None:
    workers = [w(1), w(2, pool=DEV), w(3, model="other"), w(4)]
    decision = rank_workers(workers=workers, busy={}, model_id=MODEL, pool_id=PROD)
    assert names(decision) == ["w1", "w4"]


def test_down_draining_disabled_and_starting_workers_are_excluded_with_a_reason() -> None:
    workers = [w(1, state="down"), w(2, state="draining"), w(3, state="disabled"), w(4, state="starting"), w(5)]
    decision = rank_workers(workers=workers, busy={}, model_id=MODEL, pool_id=PROD)
    assert names(decision) == ["w5"]
    assert decision.excluded == {"w1": "state down", "w2": "state draining", "w3": "state disabled",
                                 "w4": "state starting"}


def test_least_loaded_relative_to_slots_comes_first() -> None:
    workers = [w(1, slots=4), w(2, slots=8), w(3, slots=2)]
    busy = {1: 3, 2: 4, 3: 0}  # 75 %, 50 %, 0 %
    decision = rank_workers(workers=workers, busy=busy, model_id=MODEL, pool_id=PROD)
    assert names(decision) == ["w3", "w2", "w1"]
    assert [c.free for c in decision.ranked] == [2, 4, 1]


def test_healthy_is_preferred_over_degraded_even_when_busier() -> None:
    workers = [w(1, state="degraded"), w(2)]
    decision = rank_workers(workers=workers, busy={2: 3}, model_id=MODEL, pool_id=PROD)
    assert names(decision) == ["w2", "w1"]


def test_workers_that_already_failed_this_request_are_avoided() -> None:
    decision = rank_workers(workers=[w(1), w(2)], busy={}, model_id=MODEL, pool_id=PROD, avoid=frozenset({1}))
    assert names(decision) == ["w2"]
    assert decision.excluded["w1"] == "failed earlier in this request"


def test_full_workers_stay_ranked_but_have_no_free_slot() -> None:
    decision = rank_workers(workers=[w(1, slots=2)], busy={1: 2}, model_id=MODEL, pool_id=PROD)
    assert names(decision) == ["w1"] and decision.ranked[0].free == 0


def test_serves_model_looks_at_pool_and_model() -> None:
    assert serves_model([w(1)], model_id=MODEL, pool_id=PROD)
    assert not serves_model([w(1, pool=DEV)], model_id=MODEL, pool_id=PROD)
    assert not serves_model([w(1)], model_id="x", pool_id=PROD)
