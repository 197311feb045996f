"""Planning a class: the replay's students, the replay's JSON, the sweep and plan_class's answer."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from io import StringIO

import pytest
from django.core.management import call_command

from research.class_metrics import Turn, Weights
from research.class_personas import roster
from research.class_replay import arrival_offsets, student_conversation
from research.models import Calibration
from research.planner.cost import CostModel
from research.planner.plan import (
    ClassPlan,
    agent_ttft_p95_s,
    largest_class,
    plan_from_report,
    predict,
    scaled_mix,
)
from research.planner.sim import FleetPlan
from research.planner.workload import class_students

FAST = CostModel(prefill_s_per_token=1e-5, decode_s_per_token=1e-4, request_overhead_s=0.001)
SLOW = CostModel(prefill_s_per_token=0.05, decode_s_per_token=0.5, request_overhead_s=1.0)
ANSWER = re.compile(r"largest class with agent p95 TTFT ≤ (\S+) s: (\d+)")


def test_the_simulated_students_are_the_replays_own() -> None:
    mix = {"agent": 2, "chat": 1}
    students = class_students(mix=mix, seed=3, scale=0.1, context_tokens=8192, duration_s=100)
    assert [(s.name, s.persona) for s in students] == roster(mix)
    assert [s.arrival_s for s in students] == arrival_offsets(seed=3, students=3, spread_s=30.0)
    replay = student_conversation(seed=3, name="replay-agent-02", persona="agent", index=2, scale=0.1,
                                  tools_inline=True, context_tokens=8192, model="planned")
    assert students[1].conversation.request()[1] == replay.request()[1]


def test_a_first_agent_turn_is_sized_as_the_demo_worker_counted_it() -> None:
    """docs/research/class-replay.md: 11,866 tokens for the Copilot CLI's first turn at scale 1."""
    (agent,) = class_students(mix={"agent": 1}, seed=1, scale=1.0, context_tokens=32768, duration_s=100)
    assert agent.next_turn().prompt_tokens == pytest.approx(11_866, rel=0.05)


@pytest.mark.parametrize("persona", ["agent", "claude", "codex"])
def test_an_agents_turn_names_its_system_prompts_blocks_and_what_a_primed_slot_holds(persona: str) -> None:
    """workload.shared_blocks: the whole blocks of the system message the gateway sends the worker,
    each with the segments a slot primed up to it holds: growing, within the prompt's own leading
    segments, the same for two students of the persona and for a student's later turns."""
    first, second = class_students(mix={persona: 2}, seed=1, scale=0.3, context_tokens=32768, duration_s=100,
                                   shares=True)
    turn = first.next_turn()
    assert len(turn.shared) >= 2
    held = [sum(count for _, count in segments) for _, segments in turn.shared]
    assert held == sorted(held) and held[0] < held[-1] < turn.prompt_tokens
    for _, segments in turn.shared:  # a primed slot holds a prefix of the prompt's segments
        *whole, (last_key, last_count) = segments
        assert list(whole) == list(turn.segments[:len(whole)])
        assert last_key == turn.segments[len(whole)][0] and last_count <= turn.segments[len(whole)][1]
    assert [name for name, _ in second.next_turn().shared] == [name for name, _ in turn.shared]
    assert first.next_turn().shared == turn.shared
    assert class_students(mix={"chat": 1}, seed=1, scale=0.3, context_tokens=32768, duration_s=100,
                          shares=True)[0].next_turn().shared == ()  # a short system prompt: nothing to share
    assert class_students(mix={persona: 1}, seed=1, scale=0.3, context_tokens=32768,
                          duration_s=100)[0].next_turn().shared == ()  # not named for a plan that shares nothing


def test_a_prediction_has_the_class_replays_json_shape() -> None:
    plan = ClassPlan(mix={"agent": 2, "claude": 1, "chat": 1, "burst": 1},
                     fleet=FleetPlan(workers=2, slots=2, context_tokens=8192, duration_s=60), seed=1, scale=0.1)
    report = predict(plan, FAST)
    for key in ("per_student", "per_persona", "jain_index", "jain_index_per_backlogged_s", "jain_windows",
                "cache_hit_rate", "agent_cache_hit_rate", "tokens_per_s_per_worker", "tokens_per_s_by_worker",
                "chat_under_load", "config", "duration_s", "turns", "completed", "refused"):
        assert key in report, key
    assert {row["student"] for row in report["per_student"]} == {name for name, _ in roster(plan.mix)}
    assert set(report["per_persona"]["agent"]) >= {"ttft_ms", "e2e_ms", "refused", "cache_hit_rate", "students"}
    assert set(report["tokens_per_s_by_worker"]) == {"worker-1", "worker-2"}
    assert report["config"]["slots_total"] == 4 and report["refused"] == 0
    assert report["agent_cache_hit_rate"] > 0.2  # later turns find their prefix in their own slot
    json.dumps(report)  # stores as the replay's does


def test_a_prediction_is_simulated_again_from_its_own_report() -> None:
    """Research scripts re-run a committed prediction changed in one respect (plan_from_report):
    every gateway setting it was made with comes back, so the same plan predicts the same class."""
    fleet = FleetPlan(workers=2, slots=2, context_tokens=4096, duration_s=60, policy="requests", max_wait_s=12.0,
                      slot_lease_s=9.0, affinity_ttl_s=30.0, light_lane_tokens=64, affinity_wait_s=0.5,
                      affinity_wait_tokens=128, slot_files=False, model_id="planned-model")
    plan = ClassPlan(mix={"agent": 2, "chat": 1, "burst": 1}, fleet=fleet, seed=4, scale=0.05, tools_inline=False,
                     weights=Weights(prompt_token=1.0, output_token=3.0), replicates=1)
    report = predict(plan, SLOW)
    again, cost = plan_from_report(json.loads(json.dumps(report)), replicates=1)
    assert again == replace(plan, fleet=replace(fleet, cache_type=SLOW.cache_type)) and cost == SLOW
    assert predict(again, cost)["per_student"] == report["per_student"]


def test_a_report_older_than_the_gateway_settings_takes_the_defaults() -> None:
    report = predict(ClassPlan(mix={"chat": 1}, fleet=FleetPlan(workers=1, slots=1, context_tokens=2048,
                                                                duration_s=20, slot_files=False), replicates=1), FAST)
    for name in ("slot_lease_s", "affinity_ttl_s", "light_lane_tokens", "affinity_wait_s", "affinity_wait_tokens",
                 "slot_files", "max_wait_s"):
        del report["config"][name]
    again, _ = plan_from_report(report)
    assert again.fleet.slot_files is FleetPlan.slot_files and again.fleet.max_wait_s == FleetPlan.max_wait_s


def test_a_slower_worker_predicts_longer_waits() -> None:
    plan = ClassPlan(mix={"agent": 3}, fleet=FleetPlan(workers=1, slots=2, context_tokens=8192, duration_s=120),
                     seed=1, scale=0.1)
    fast, slow = predict(plan, FAST), predict(plan, SLOW)
    assert slow["per_persona"]["agent"]["ttft_ms"]["p95"] > 100 * fast["per_persona"]["agent"]["ttft_ms"]["p95"]


def test_the_mix_scales_to_a_class_size_keeping_its_proportions() -> None:
    assert scaled_mix({"agent": 12, "claude": 6, "codex": 4, "chat": 6, "burst": 2}, 15) == \
        {"agent": 6, "claude": 3, "codex": 2, "chat": 3, "burst": 1}
    assert sum(scaled_mix({"agent": 1, "chat": 2}, 7).values()) == 7


def test_refused_agent_turns_count_as_waiting_for_ever() -> None:
    done = [Turn(student="a", persona="agent", sent_s=0, end_s=2, first_token_s=1, completed=True)] * 19
    refused = [Turn(student="a", persona="agent", sent_s=0, end_s=30, completed=False, refused_reason="queue_timeout")]
    assert agent_ttft_p95_s(done) == pytest.approx(1.0)
    assert agent_ttft_p95_s(done + refused) == float("inf")
    rows = [{"students": n, "report": {"agents": {"ttft_p95_s_refused_as_infinite": p}}}
            for n, p in ((5, 2.0), (10, 8.0), (20, 12.0), (30, 9.0))]
    assert largest_class(rows, 10.0) == 10  # 30 meets it again, but 20 did not: the answer stops at 10
    assert largest_class(rows, 1.0) == 0


@pytest.mark.django_db
def test_plan_class_prints_the_table_and_the_answer_for_a_stored_calibration(tmp_path) -> None:  # noqa: ANN001
    calibration = Calibration.objects.create(source="runs", cost=FAST.as_dict(), slots=2, context=8192)
    out = StringIO()
    call_command("plan_class", "--calibration", str(calibration.pk), "--mix", "agent:2,chat:1", "--workers", "1",
                 "--students", "1,3", "--duration", "60", "--scale", "0.1", "--target-p95", "5",
                 "--json", str(tmp_path / "plan.json"), "--plot", str(tmp_path / "plan.svg"), stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert ANSWER.fullmatch(lines[-1]).groups() == ("5", "3")  # a fast worker: every size meets 5 s
    assert any(line.split()[:1] == ["3"] for line in lines)  # the table's row for 3 students
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert [row["students"] for row in saved["rows"]] == [1, 3]
    assert saved["rows"][1]["report"]["config"]["students"] == 3
    assert "<svg" in (tmp_path / "plan.svg").read_text()


@pytest.mark.django_db
def test_a_class_plan_follows_the_sites_gateway_settings(settings) -> None:  # noqa: ANN001
    """The planner predicts the gateway this site runs: its slot files, light lane and affinity
    wait (not the simulator's defaults), as it already did for the fair policy and the maximum wait."""
    from research.planner_services import class_plan

    calibration = Calibration.objects.create(source="runs", cost=FAST.as_dict(), slots=4, context=8192)
    settings.OCS = {**settings.OCS, "SLOT_FILES": False, "LIGHT_LANE_TOKENS": 512, "AFFINITY_WAIT_S": 5.0,
                    "AFFINITY_WAIT_TOKENS": 2048, "FAIR_POLICY": "requests", "SHARED_PREFIX_K": 5}
    fleet = class_plan(calibration=calibration, mix={"agent": 1}, workers=1).fleet
    assert (fleet.slot_files, fleet.light_lane_tokens, fleet.affinity_wait_s, fleet.affinity_wait_tokens,
            fleet.policy, fleet.shared_prefix_k) == (False, 512, 5.0, 2048, "requests", 5)


@pytest.mark.django_db
def test_plan_class_answers_zero_when_even_the_smallest_class_waits_too_long() -> None:
    calibration = Calibration.objects.create(source="runs", cost=SLOW.as_dict(), slots=1, context=8192)
    out = StringIO()
    call_command("plan_class", "--calibration", str(calibration.pk), "--mix", "agent:1", "--students", "1,2",
                 "--duration", "60", "--scale", "0.1", "--target-p95", "1", stdout=out)
    assert out.getvalue().strip().splitlines()[-1] == "largest class with agent p95 TTFT ≤ 1 s: 0"


@pytest.mark.django_db
def test_plan_class_on_the_assumed_rig_says_whether_the_kv_cache_fits() -> None:
    out = StringIO()
    call_command("calibrate_worker", "--assumptions", "--gpus", "4", stdout=out)
    number = out.getvalue().strip().splitlines()[-1].split()[-1]
    out = StringIO()
    call_command("plan_class", "--calibration", number, "--mix", "agent:1", "--slots", "8", "--context", "32768",
                 "--cache-type", "f16", "--duration", "30", stdout=out)
    text = out.getvalue()
    assert "DOES NOT FIT in memory" in text  # 16.2 GB + 8 x 32768 x 256 KiB of f16 KV > 4 x 8 GB
    assert text.strip().splitlines()[-1].endswith(": 0")


@pytest.mark.django_db
def test_the_plan_a_class_page_answers_for_teachers_only(client, teacher, student) -> None:  # noqa: ANN001
    calibration = Calibration.objects.create(source="runs", cost=FAST.as_dict(), slots=2, context=8192, label="cpu")
    query = {"calibration": calibration.pk, "mix": "agent:2,chat:1", "students": "1,3", "workers": 1,
             "target_p95": 5, "duration": 60, "scale": 0.1, "seed": 1}
    assert client.get("/research/plan/", query).status_code == 302  # signed out: to sign-in
    client.force_login(student)
    assert client.get("/research/plan/", query).status_code == 403
    client.force_login(teacher)
    page = client.get("/research/plan/", query).content.decode()
    assert "With this set-up a class of 3 waits about" in page and "within your 5 s" in page
    assert "<svg" in page and "∞" not in page and 'class="table-wrap"' in page
    refused = client.get("/research/plan/", {**query, "mix": "chat:3"}).content.decode()
    assert "needs an agent persona" in refused and "<svg" not in refused


@pytest.mark.django_db
def test_the_page_lists_an_assumed_calibrations_sources(client, teacher) -> None:  # noqa: ANN001
    out = StringIO()
    call_command("calibrate_worker", "--assumptions", stdout=out)
    number = out.getvalue().strip().splitlines()[-1].split()[-1]
    client.force_login(teacher)
    page = client.get("/research/plan/", {"calibration": number, "mix": "agent:1", "students": "1", "workers": 1,
                                          "target_p95": 60, "duration": 30, "scale": 0.1, "seed": 1}).content.decode()
    assert "Built from assumptions" in page and "GTX 1070 data sheet" in page
    assert "With this set-up" in page


def test_the_answer_is_one_sentence_a_teacher_can_act_on() -> None:
    from research.planner.report import plan_sentence

    def row(students: int, agents: float | None, refused: int = 0) -> dict:
        return {"students": students, "agents_p95_s": agents, "refused": refused}

    table = [row(5, 12.0), row(10, 38.6), row(20, 75.0, refused=3), row(30, float("inf"), refused=40)]
    assert plan_sentence(table, target_p95_s=60) == (
        "With this set-up a class of 10 waits about 39 s at worst (95 times in 100) for an agent's first answer, "
        "within your 60 s; from 20 students some turns are refused after waiting too long.")
    assert plan_sentence(table[:2], target_p95_s=60).endswith("no turn is refused up to 10 students.")
    assert plan_sentence([row(5, float("inf"), refused=2)], target_p95_s=60) == (
        "With this set-up even a class of 5 waits longer than your 60 s for an agent's first answer; from 5 "
        "students some turns are refused after waiting too long.")


@pytest.mark.django_db
def test_a_fresh_install_makes_a_calibration_from_one_button_and_gets_an_answer(client, teacher, student) -> None:  # noqa: ANN001
    assert not Calibration.objects.exists()
    client.force_login(student)
    assert client.post("/research/plan/assume/").status_code == 403
    client.force_login(teacher)
    page = client.get("/research/plan/").content.decode()
    assert "Make a calibration from the rigs" in page and "calibrate_worker --assumptions --gpus 8" in page
    assert 'id="plan-form"' not in page  # no form that could only say "this field is required"
    made = client.post("/research/plan/assume/")
    calibration = Calibration.objects.get()
    assert made.status_code == 302 and f"calibration={calibration.pk}" in made["Location"]
    assert calibration.source == "assumptions"
    answered = client.get(made["Location"]).content.decode()  # the rigs' defaults, planned at once
    assert 'id="plan-form"' in answered and "With this set-up" in answered
