"""The rigs search (research/planner/rigs.py, plan_rigs, "Plan the rigs"): hand-made cases whose
answer is known, the split of a model's weights into read and held, the command and the page.
Tiny classes (scale 0.1, a minute simulated) keep every case to a second or two."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from fleet.gguf import GgufFacts
from research.management.commands.calibrate_worker import weight_sizes
from research.metrics import percentile
from research.models import Calibration, RigPlan
from research.planner.assumptions import RigAssumptions, assumed_cost, memory_check
from research.planner.plan import scaled_mix
from research.planner.rigs import (
    PRESETS,
    Configuration,
    ModelCandidate,
    Targets,
    candidate_from_gguf,
    configuration_cost,
    configurations,
    minimum_context,
    rigs_of,
    search,
    simulate_size,
)
from research.planner.sim import FleetPlan, simulate
from research.planner.workload import class_students

RIGS = rigs_of(2, 8)
FLEET = FleetPlan(workers=1, slots=1, context_tokens=32768, duration_s=60.0)
TINY = {"seed": 1, "scale": 0.1}


def _config(model: ModelCandidate, *, cards: int = 2, workers: int = 1, slots: int = 1, context: int = 32768,
            cache_type: str = "q8_0", k: int = 0) -> Configuration:
    return Configuration(model, cards, workers, slots, context, cache_type, k)


def test_a_model_that_does_not_fit_a_cards_memory_is_never_proposed() -> None:
    big = replace(PRESETS["dense-8b"], key="dense-20b", active_billions=20.0, total_billions=20.0)  # 12 GB
    kept, rejected = configurations([big], rigs_of(1, 1), min_context=4096)
    assert kept == []
    assert [r.what for r in rejected] == ["1 card(s) per worker"]
    kept, _ = configurations(list(PRESETS.values()), RIGS, min_context=32768)
    assert kept
    for config in kept:
        assert config.memory_gb() <= 8 * config.cards_per_worker, config.label()
        assert config.context_tokens >= 32768, config.label()


def test_a_mixture_of_experts_is_placed_by_its_total_weights_not_its_active_ones() -> None:
    moe = PRESETS["moe-30b-a3b"]
    assert moe.active_gb < 2.5 < 18 < moe.total_gb  # a token reads ~2 GB; the cards hold ~18 GB
    kept, rejected = configurations([moe], RIGS, min_context=32768)
    assert {c.cards_per_worker for c in kept} == {4, 8}
    assert {r.what for r in rejected} >= {"1 card(s) per worker", "2 card(s) per worker"}


def test_the_memory_check_counts_the_weights_the_cards_hold() -> None:
    dense = RigAssumptions(gpus=1, weight_gb=2.0, total_weight_gb=None, kv_bytes_per_token_f16=98304)
    moe = replace(dense, total_weight_gb=18.3)
    for rig, fits in ((dense, True), (moe, False)):
        _, _, memory = assumed_cost(rig)
        ok, detail = memory_check(memory, slots=1, context_tokens=32768, cache_type="q8_0")
        assert ok is fits, detail
    # decode reads the active weights only: both decode at the same speed
    assert assumed_cost(dense)[0].decode_s_per_token == assumed_cost(moe)[0].decode_s_per_token


def test_model_gb_alone_is_both_the_weights_read_and_held() -> None:
    assert weight_sizes(model_gb=17.0, active_gb=None, total_gb=None) == (17.0, 17.0)
    assert weight_sizes(model_gb=None, active_gb=2.0, total_gb=18.3) == (2.0, 18.3)
    assert weight_sizes(model_gb=17.0, active_gb=2.0, total_gb=None) == (2.0, 17.0)
    assert weight_sizes(model_gb=None, active_gb=None, total_gb=None, default_gb=16.2) == (16.2, None)
    with pytest.raises(ValueError, match="below"):
        weight_sizes(model_gb=None, active_gb=4.0, total_gb=2.0)


@pytest.mark.django_db
def test_calibrate_worker_stores_held_weights_for_the_memory_check(capsys) -> None:  # noqa: ANN001
    call_command("calibrate_worker", "--assumptions", "--gpus", "1", "--active-gb", "2", "--total-gb", "18.3",
                 "--model-billions", "3.3", "--kv-bytes-per-token", "98304")
    calibration = Calibration.objects.get()
    assert calibration.memory["weight_gb"] == 18.3
    names = {item["name"]: item["value"] for item in calibration.assumptions}
    assert names["weights read per token"] == 2.0 and names["weights held by the cards"] == 18.3
    call_command("calibrate_worker", "--assumptions", "--gpus", "4", "--model-gb", "17")
    assert Calibration.objects.order_by("-id").first().memory["weight_gb"] == 17.0


def test_more_slots_of_the_same_speed_serve_more_students() -> None:
    model = PRESETS["dense-8b"]
    mix = {"agent": 3, "claude": 1}
    targets = Targets(agent_p95_s=10.0, chat_p95_s=15.0)
    one, four = (simulate_size(_config(model, slots=slots), RIGS, mix=mix, students=4, fleet=FLEET,
                               targets=targets, **TINY) for slots in (1, 4))
    assert four["agents_p95_s"] < one["agents_p95_s"]
    assert four["met"] and not one["met"], (one, four)
    # and the search ranks them so: same model, placement, speed; only the slots differ
    result = search(models=[model], rigs=rigs_of(1, 2), mix=mix, sizes=[4], fleet=FLEET, targets=targets,
                    slot_choices=(1, 4), cache_types=("q4_0",), prefix_choices=(0,), **TINY)
    ranked = [(row["slots"], row["served"]) for row in result["rows"] if row["cards_per_worker"] == 2]
    assert ranked == [(4, 4), (1, 0)], result["rows"]


def _first_turn_ttfts(config: Configuration, mix: dict[str, int]) -> dict[str, float]:
    fleet = replace(FLEET, workers=config.workers, slots=config.slots, context_tokens=config.context_tokens,
                    cache_type=config.cache_type, shared_prefix_k=config.shared_prefix_k, slot_files=True)
    cost = configuration_cost(config, RIGS)
    students = class_students(mix=mix, seed=1, scale=0.1, context_tokens=config.context_tokens,
                              duration_s=fleet.duration_s, tools_inline=True, model=fleet.model_id,
                              tokens=cost.tokens, shares=config.shared_prefix_k > 0)
    turns, _ = simulate(plan=fleet, costs=[cost] * fleet.workers, students=students)
    first: dict[str, float] = {}
    for turn in sorted(turns, key=lambda t: t.sent_s):
        if turn.student not in first:
            assert turn.ttft_ms is not None, turn
            first[turn.student] = turn.ttft_ms / 1000
    return first


@pytest.mark.parametrize(("mix", "workers", "slots"), [
    ({"agent": 6, "claude": 2, "chat": 1}, 2, 4),
    ({"agent": 8, "claude": 4, "codex": 2, "chat": 2}, 2, 4),
    ({"agent": 6, "claude": 2, "chat": 1}, 1, 2),
])
def test_the_shared_prefix_on_never_predicts_slower_first_turns(mix: dict[str, int], workers: int,
                                                                slots: int) -> None:
    """The class's first turns, p95 and longest: a student's own first turn may wait longer (a
    classmate's shared-prefix save is a task of the worker's loop), the class's do not."""
    config = _config(PRESETS["dense-8b"], workers=workers, slots=slots)
    off = _first_turn_ttfts(config, mix)
    on = _first_turn_ttfts(replace(config, shared_prefix_k=3), mix)
    assert off.keys() == on.keys() and len(off) == sum(mix.values())
    assert percentile(sorted(on.values()), 95) <= percentile(sorted(off.values()), 95)
    assert max(on.values()) <= max(off.values())
    assert sum(on.values()) < sum(off.values())  # some first turn found a classmate's prefix


def test_the_smallest_context_is_the_largest_any_client_in_the_mix_needs() -> None:
    assert minimum_context({"chat": 5, "burst": 1}).tokens == 8192
    assert minimum_context({"chat": 5, "claude": 1}).tokens == 32768
    with pytest.raises(ValueError):
        minimum_context({"nobody": 1})


def test_a_candidate_comes_from_a_gguf_files_metadata() -> None:
    facts = GgufFacts(path="/m/qwen3-8b.gguf", architecture="qwen3", name="Qwen3 8B", file_type=15,
                      file_bytes=5_030_000_000, tensor_bytes=5_000_000_000, token_embedding_bytes=300_000_000,
                      tied_embeddings=False, layers=36, embedding_length=4096, heads=32, kv_heads=8, head_dim=128,
                      context_length=40960, vocab_size=151936, parameters=8_200_000_000)
    dense = candidate_from_gguf(facts)
    assert (dense.layers, dense.kv_heads, dense.head_dim, dense.hidden_size) == (36, 8, 128, 4096)
    assert dense.total_gb == pytest.approx(5.0) and not dense.moe
    assert dense.kv_bytes_per_token("f16") == 2 * 36 * 8 * 128 * 2
    moe = candidate_from_gguf(facts, active_billions=3.3)
    assert moe.moe and moe.active_gb < moe.total_gb == pytest.approx(5.0)


def test_scaled_classes_keep_an_agent_so_the_search_has_an_answer() -> None:
    with pytest.raises(ValueError, match="agent"):
        search(models=[PRESETS["dense-4b"]], rigs=RIGS, mix={"chat": 2}, sizes=[2], fleet=FLEET)
    assert sum(scaled_mix({"agent": 12, "chat": 6}, 10).values()) == 10


def tiny_rig_plan() -> RigPlan:
    """A stored search small enough for a page test: one model, one class size, a minute simulated."""
    call_command("plan_rigs", "--models", "dense-4b", "--students", "2", "--duration", "60", "--scale", "0.1",
                 "--mix", "agent:1,chat:1")
    return RigPlan.objects.order_by("-id").first()


@pytest.mark.django_db
def test_plan_rigs_prints_the_ranking_and_writes_json_and_a_plot(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out_json, out_svg = tmp_path / "plan.json", tmp_path / "plan.svg"
    call_command("plan_rigs", "--models", "dense-8b,moe-30b-a3b", "--students", "2,3", "--duration", "60",
                 "--scale", "0.1", "--mix", "agent:2,chat:1", "--json", str(out_json), "--plot", str(out_svg))
    printed = capsys.readouterr().out
    assert "rank" in printed and "best of each model:" in printed and "rig plan " in printed
    result = json.loads(out_json.read_text())
    served = [row["served"] for row in result["rows"]]
    assert served == sorted(served, reverse=True)
    assert {row["model"] for row in result["rows"]} == {"dense-8b", "moe-30b-a3b"}
    assert all(row["cards_per_worker"] >= 4 for row in result["rows"] if row["model"] == "moe-30b-a3b")
    assert {curve["model"] for curve in result["curves"]} == {"dense-8b", "moe-30b-a3b"}
    assert out_svg.read_text().startswith("<svg") and "moe-30b-a3b" in out_svg.read_text()
    stored = RigPlan.objects.get()
    # The command that made it, from its own options, not the test runner's command line.
    assert stored.command == ("python manage.py plan_rigs --models dense-8b,moe-30b-a3b --mix agent:2,chat:1 "
                              "--students 2,3 --duration 60.0 --scale 0.1")
    assert stored.result["sizes"] == [2, 3]
    with pytest.raises(CommandError, match="unknown"):
        call_command("plan_rigs", "--models", "dense-70b", "--no-save")


@pytest.mark.django_db
def test_plan_the_rigs_page_shows_the_stored_search_to_teachers_only(client: Client, teacher,
                                                                     student) -> None:  # noqa: ANN001
    client.force_login(teacher)
    empty = client.get("/research/rigs/").content.decode()
    assert 'id="rigs-empty"' in empty and "manage.py plan_rigs" in empty
    tiny_rig_plan()
    page = client.get("/research/rigs/").content.decode()
    assert 'id="rigs-ranked"' in page and 'class="table-wrap"' in page and "dense-4b" in page
    assert "<svg" in page and "Replaced by" in page
    assert 'href="/research/rigs/"' in client.get("/research/plan/").content.decode()
    client.force_login(student)
    assert client.get("/research/rigs/").status_code == 403
    client.logout()
    assert client.get("/research/rigs/").status_code == 302
