from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.scheduler import WorkerView, conversation_key, rank_workers, serves_model

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


def test_serves_model_looks_at_pools_and_model() -> None:
    assert serves_model([w(1)], model_id=MODEL, pool_ids={PROD})
    assert not serves_model([w(1, pool=DEV)], model_id=MODEL, pool_ids={PROD})
    assert serves_model([w(1, pool=DEV)], model_id=MODEL, pool_ids={PROD, DEV})
    assert not serves_model([w(1)], model_id="x", pool_ids={PROD})


def test_the_conversations_previous_worker_comes_first_while_it_has_a_free_slot() -> None:
    workers = [w(1), w(2)]
    decision = rank_workers(workers=workers, busy={1: 0, 2: 3}, model_id=MODEL, pool_id=PROD, affinity_worker_id=2)
    assert names(decision) == ["w2", "w1"]
    assert decision.ranked[0].reason == "served this conversation before (prompt cache)"
    full = rank_workers(workers=workers, busy={1: 0, 2: 4}, model_id=MODEL, pool_id=PROD, affinity_worker_id=2)
    assert names(full) == ["w1", "w2"]  # a full cache-holder does not make the student wait


def test_affinity_does_not_override_a_suspect_or_degraded_worker() -> None:
    workers = [w(1), w(2, state="degraded"), w(3)]
    assert names(rank_workers(workers=workers, busy={}, model_id=MODEL, pool_id=PROD, affinity_worker_id=2))[0] == "w1"
    decision = rank_workers(workers=workers, busy={}, model_id=MODEL, pool_id=PROD, affinity_worker_id=3,
                            suspects=frozenset({3}))
    assert names(decision) == ["w1", "w2", "w3"]  # unsound ones last, then by name


def test_suspect_workers_are_ranked_after_sound_ones_even_when_idle() -> None:
    decision = rank_workers(workers=[w(1), w(2)], busy={1: 0, 2: 3}, model_id=MODEL, pool_id=PROD,
                            suspects=frozenset({1}))
    assert names(decision) == ["w2", "w1"]
    assert "suspect" in decision.ranked[1].reason


def test_a_lending_pool_serves_only_when_the_keys_pool_has_no_routable_worker() -> None:
    workers = [w(1, state="down"), w(2, pool=DEV), w(3, pool=DEV, state="down")]
    decision = rank_workers(workers=workers, busy={}, model_id=MODEL, pool_id=PROD, lending_pool_ids=frozenset({DEV}))
    assert names(decision) == ["w2"]
    assert decision.lent_by == ("dev",)
    assert "lent by pool dev" in decision.ranked[0].reason
    workers[0] = w(1)
    own = rank_workers(workers=workers, busy={1: 4}, model_id=MODEL, pool_id=PROD, lending_pool_ids=frozenset({DEV}))
    assert names(own) == ["w1"] and own.lent_by == ()  # busy but healthy: the pool waits for its own


def test_no_promotion_without_a_lending_pool() -> None:
    decision = rank_workers(workers=[w(1, state="down"), w(2, pool=DEV)], busy={}, model_id=MODEL, pool_id=PROD)
    assert decision.ranked == []


def test_conversation_key_is_stable_across_turns_and_differs_between_students() -> None:
    first = [{"role": "system", "content": "You are a tutor."}, {"role": "user", "content": "What is a list?"}]
    second = first + [{"role": "assistant", "content": "A list is…"}, {"role": "user", "content": "And a tuple?"}]
    assert conversation_key(user_id=1, model_id=MODEL, messages=first) == conversation_key(
        user_id=1, model_id=MODEL, messages=second)
    assert conversation_key(user_id=1, model_id=MODEL, messages=first) != conversation_key(
        user_id=2, model_id=MODEL, messages=first)
    other = [{"role": "system", "content": "You are a tutor."}, {"role": "user", "content": "What is a dict?"}]
    assert conversation_key(user_id=1, model_id=MODEL, messages=first) != conversation_key(
        user_id=1, model_id=MODEL, messages=other)


def test_a_long_prompt_goes_first_to_a_worker_whose_slot_holds_it() -> None:
    small = replace(w(1, slots=4), context=4096)
    large = replace(w(2, slots=1), context=32768)
    short = rank_workers(workers=[small, large], busy={2: 0, 1: 0}, model_id=MODEL, pool_id=PROD, prompt_tokens_estimate=100)
    assert [c.worker.id for c in short.ranked] == [1, 2]  # 0/4 and 0/1 busy: name order
    long = rank_workers(workers=[small, large], busy={}, model_id=MODEL, pool_id=PROD, prompt_tokens_estimate=9000)
    assert [c.worker.id for c in long.ranked] == [2, 1]
    assert "may be too small" in long.ranked[1].reason


def test_a_worker_known_too_small_is_left_out_and_unknown_contexts_stay() -> None:
    small, unknown = replace(w(1), context=4096), w(2)
    decision = rank_workers(workers=[small, unknown], busy={}, model_id=MODEL, pool_id=PROD, min_context=5000)
    assert [c.worker.id for c in decision.ranked] == [2]
    assert "too small" in decision.excluded["w1"]


def test_context_options_turn_on_yarn_only_past_the_native_context() -> None:
    from fleet.local_worker import context_options

    assert context_options(4096).rope_scaling is None
    yarn = context_options(32768)
    assert (yarn.rope_scaling, yarn.rope_scale, yarn.yarn_orig_ctx) == ("yarn", 4.0, 8192)
    assert "--rope-scaling" in yarn.args() and context_options(9000).rope_scale == 2.0
    with pytest.raises(ValueError):
        context_options(40000)


def test_local_launch_options_pass_the_step_size_to_the_worker() -> None:
    """`demo --batch-size N` reaches llama-server as --batch-size N; without it, its own default."""
    from fleet.embedded import local_launch_options

    args = local_launch_options(4096, batch_size=512).args()
    assert args[args.index("--batch-size") + 1] == "512"
    assert "--batch-size" not in local_launch_options(4096, batch_size=None).args()
    assert "--rope-scaling" in local_launch_options(32768, batch_size=256).args()


def lane(id: int, *, tokens: int = 1024, slots: int = 2, state: str = "healthy") -> WorkerView:
    return replace(w(id, slots=slots, state=state, name=f"lane{id}"), lane_tokens=tokens)


def test_a_short_prompt_goes_first_to_a_lane_worker_with_a_free_slot() -> None:
    """Before the conversation's worker and before an idle ordinary worker: the quiet student's
    question is not queued behind the agents."""
    workers = [w(1), w(2), lane(3)]
    decision = rank_workers(workers=workers, busy={1: 0, 2: 3, 3: 1}, model_id=MODEL, pool_id=PROD,
                            affinity_worker_id=2, prompt_tokens_estimate=40)
    assert names(decision) == ["lane3", "w2", "w1"]
    assert decision.ranked[0].reason.startswith("kept for short prompts (at most 1024 tokens), 1/2")
    assert decision.lane_free == 0  # nothing kept from this request


def test_a_lane_worker_full_ranks_as_any_other_for_a_short_prompt() -> None:
    decision = rank_workers(workers=[w(1), lane(3)], busy={1: 1, 3: 2}, model_id=MODEL, pool_id=PROD,
                            prompt_tokens_estimate=40)
    assert names(decision) == ["w1", "lane3"]
    assert [c.free for c in decision.ranked] == [3, 0]


def test_a_long_prompt_never_goes_to_a_lane_worker_even_idle_and_the_free_slots_kept_are_counted() -> None:
    workers = [w(1), lane(3), lane(4, tokens=4096)]
    decision = rank_workers(workers=workers, busy={1: 4, 3: 0, 4: 1}, model_id=MODEL, pool_id=PROD,
                            prompt_tokens_estimate=2000)
    assert names(decision) == ["lane4", "w1"]  # 2,000 tokens fit lane4's 4,096, not lane3's 1,024
    assert decision.excluded["lane3"] == "kept for short prompts (at most 1024 tokens; this one is about 2000)"
    assert decision.lane_free == 2  # lane3's two slots, which a short prompt behind may take
    only_long = rank_workers(workers=[lane(3)], busy={}, model_id=MODEL, pool_id=PROD, prompt_tokens_estimate=2000)
    assert only_long.ranked == [] and "lane3" in only_long.excluded  # no worker: refused, never squeezed in


def test_a_lane_worker_out_of_service_keeps_nothing_free_and_takes_nothing() -> None:
    decision = rank_workers(workers=[w(1), lane(3, state="down")], busy={1: 4}, model_id=MODEL, pool_id=PROD,
                            prompt_tokens_estimate=2000)
    assert decision.lane_free == 0 and decision.excluded["lane3"] == "state down"
    short = rank_workers(workers=[w(1), lane(3, state="down")], busy={}, model_id=MODEL, pool_id=PROD,
                         prompt_tokens_estimate=10)
    assert names(short) == ["w1"]
