"""The research pages: teachers only (anonymous -> sign-in, students -> 403), charts drawn on the
server as SVG, comparisons with ratios, exports."""
from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from research.models import BenchmarkRun, Experiment, GpuSample, RequestSample

pytestmark = pytest.mark.django_db


def _run(group: str, concurrency: int, throughput: float, tpot_p90: float, experiment: Experiment | None = None,
         label: str = "") -> BenchmarkRun:
    run = BenchmarkRun.objects.create(
        group=group, target="worker", base_url="http://127.0.0.1:9", model="smollm2", prompt_tokens=64,
        output_tokens=8, concurrency=concurrency, requests=3, status="done", experiment=experiment,
        label=label or f"concurrency {concurrency}", ended_at=timezone.now(),
        summary={"ttft_ms": {"p50": 100.0, "p90": 150.0, "p99": 160.0, "mean": 110.0},
                 "tpot_ms": {"p50": tpot_p90 - 5, "p90": tpot_p90, "p99": tpot_p90, "mean": tpot_p90 - 4},
                 "inter_chunk_latency_ms": {"p50": 9.0, "p90": 12.0, "p99": 20.0, "mean": 10.0},
                 "e2e_ms": {"p50": 200.0, "p90": 250.0, "p99": 260.0, "mean": 210.0},
                 "request_throughput": 2.0, "output_throughput": throughput, "generation_rate": 80.0,
                 "prompt_eval_rate": 500.0, "goodput": None, "completed": 3, "duration_s": 1.5},
    )
    for index in range(3):
        RequestSample.objects.create(run=run, index=index, sent_ms=index * 10.0, ttft_ms=100.0 + index * 20,
                                     e2e_ms=200.0 + index, tpot_ms=10.0 + index, inter_chunk_gaps_ms=[9.0, 11.0],
                                     prompt_tokens=64, output_tokens=8)
    return run


@pytest.fixture
def runs() -> list[BenchmarkRun]:
    experiment = Experiment.objects.create(title="Slots", question="Do more slots give more tokens per second?",
                                           decision="Use 4 slots on the dev worker.")
    first = _run("aaa", 1, 40.0, 12.0, experiment)
    second = _run("aaa", 2, 70.0, 15.0, experiment)
    _run("bbb", 1, 20.0, 24.0, label="threads=1 concurrency 1")
    origin = timezone.now()
    for second_no in range(3):
        for gpu in (0, 1):
            GpuSample.objects.create(run=first, at=origin + timedelta(seconds=second_no), rig="rig-a", gpu_index=gpu,
                                     utilization_pct=20 * gpu + second_no, memory_used_mib=4000 + gpu)
    from research.gpu_summary import summarize_gpus

    first.summary["gpus"] = summarize_gpus(
        [{**row, "pcie_gen": 1, "pcie_width": 1, "pcie_max_gen": 3, "pcie_max_width": 16}
         for row in GpuSample.objects.filter(run=first).values()])
    first.save(update_fields=["summary"])
    return [first, second]


def _pages(runs: list[BenchmarkRun]) -> list[str]:
    run = runs[0]
    return ["/research/", f"/research/runs/{run.pk}/", "/research/groups/aaa/", "/research/compare/?a=1&b=2",
            f"/research/runs/{run.pk}/export.csv", f"/research/runs/{run.pk}/export.json",
            "/research/groups/aaa/export.csv", f"/research/experiments/{run.experiment_id}/", "/research/plan/"]


def test_anonymous_visitors_are_sent_to_sign_in(client: Client, runs) -> None:  # noqa: ANN001
    for url in _pages(runs):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next=/research/"), url


def test_students_are_refused(client: Client, student, runs) -> None:  # noqa: ANN001
    client.force_login(student)
    for url in _pages(runs):
        assert client.get(url).status_code == 403, url


def test_teacher_sees_runs_experiments_and_charts(client: Client, teacher, runs) -> None:  # noqa: ANN001
    client.force_login(teacher)
    index = client.get("/research/").content.decode()
    assert "Do more slots give more tokens per second?" in index and "Use 4 slots" in index
    assert f'href="/research/runs/{runs[0].pk}/"' in index
    detail = client.get(f"/research/runs/{runs[0].pk}/").content.decode()
    assert detail.count("<svg") == 6  # three latency histograms, tokens/s vs load, GPU util and memory
    assert "rig-a/gpu0" in detail and "rig-a/gpu1" in detail
    assert "Time to first token (ms)" in detail and "Tokens per second vs load" in detail
    assert "<td>Gen1 x1</td>" in detail and "<td>Gen3 x16</td>" in detail and "<td>21 / 22</td>" in detail
    assert "Inter-chunk latency (ms)" in detail and "AIPerf's ITL" in detail and ">ITL" not in detail
    assert "<script" not in detail
    experiment = client.get(f"/research/experiments/{runs[0].experiment_id}/").content.decode()
    assert "Use 4 slots on the dev worker." in experiment and experiment.count("<svg") == 1


def test_comparison_shows_ratios(client: Client, teacher, runs) -> None:  # noqa: ANN001
    client.force_login(teacher)
    page = client.get(f"/research/compare/?a={runs[0].pk}&b={runs[1].pk}").content.decode()
    assert "1.75×" in page  # 70 / 40 output tokens per second
    assert "1.25×" in page  # TPOT p90 15 / 12
    groups = client.get("/research/compare/?a=group:bbb&b=group:aaa").content.decode()
    assert "2.00×" in groups  # concurrency 1: 40 / 20 tok/s
    assert "3.50×" in groups  # peak 70 / 20
    assert client.get("/research/compare/?a=999&b=group:nope").status_code == 404
    assert client.get("/research/compare/?a=<script>&b=1").status_code == 404


def test_exports(client: Client, teacher, runs) -> None:  # noqa: ANN001
    client.force_login(teacher)
    rows = list(csv.DictReader(io.StringIO(client.get(f"/research/runs/{runs[0].pk}/export.csv").content.decode())))
    assert [row["ttft_ms"] for row in rows] == ["100.0", "120.0", "140.0"]
    data = json.loads(client.get(f"/research/runs/{runs[0].pk}/export.json").content)
    assert data["summary"]["output_throughput"] == 40.0 and len(data["samples"]) == 3
    group = list(csv.DictReader(io.StringIO(client.get("/research/groups/aaa/export.csv").content.decode())))
    assert [row["output_throughput"] for row in group] == ["40.0", "70.0"]
    assert client.get("/research/groups/nope/export.csv").status_code == 404
    assert client.get("/research/runs/999/").status_code == 404


def test_unknown_export_format_is_404(client: Client, teacher, runs) -> None:  # noqa: ANN001
    client.force_login(teacher)
    assert client.get(f"/research/runs/{runs[0].pk}/export.xml").status_code == 404


def test_charts_escape_text_and_say_when_empty() -> None:
    from research.svg import Series, histogram, line_chart

    chart = line_chart([Series("<b>", [(1, 2.0), (2, 3.0)])], title="a & b", x_label="x", y_label="y")
    assert "&lt;b&gt;" in chart and "a &amp; b" in chart and "<b>" not in chart
    assert "no data" in histogram([], title="TTFT", x_label="ms")


def test_the_first_research_questions_are_listed(client: Client, teacher) -> None:  # noqa: ANN001
    client.force_login(teacher)
    page = client.get("/research/").content.decode()
    assert "Q1 Prompt-eval anomaly" in page and "Q5 Prefix reuse" in page


def test_a_small_share_of_the_roofline_ceiling_never_reads_as_nothing(client: Client, teacher) -> None:  # noqa: ANN001
    run = _run("cpu", 1, 12.5, 80.0)
    run.summary = {**run.summary, "generation_rate": 12.5,
                   "roofline": {"ceiling_tok_s": 2650.0, "percent_of_ceiling": 100 * 12.5 / 2650, "weight_gb": 0.1,
                                "bandwidth_gbs": 265.0, "gpus": 1, "split_mode": "none"}}
    run.save(update_fields=["summary"])
    client.force_login(teacher)
    for page in (f"/research/runs/{run.pk}/", "/research/"):
        text = client.get(page).content.decode()
        assert "0.5 % of" in text and "= 0%" not in text, page


def test_a_quiet_student_probe_shows_its_phases_and_its_verdict_in_words(client: Client, teacher) -> None:  # noqa: ANN001
    def phase(chat_p95: float, agents: int) -> dict:
        return {"chat": {"turns": 10, "answered": 10, "refused": 0, "ttft_p50_s": 0.1, "ttft_p95_s": chat_p95},
                "agents": {"turns": agents, "answered": agents, "refused": 0, "ttft_p50_s": 5.0, "ttft_p95_s": 20.0},
                "burst": {"turns": 0, "answered": 0, "refused": 0, "ttft_p50_s": None, "ttft_p95_s": None}}
    summary = {"probe": "quiet", "lane_workers": 1, "alone": phase(0.2, 0), "load": phase(1.4, 24),
               "lane_alone": phase(0.6, 17), "without_lanes": phase(11.0, 33),
               "verdict": {"chat_p95_ratio": 7.0, "bound": 3.0, "holds": False, "lane_alone_over_alone": 3.0,
                           "without_lanes_ratio": 55.0}}
    run = BenchmarkRun.objects.create(kind=BenchmarkRun.Kind.PROBE, group="g-probe", scenario="probe-quiet",
                                      label="quiet student", target="gateway", base_url="http://x", model="m",
                                      prompt_tokens=0, output_tokens=0, requests=0, summary=summary)
    client.force_login(teacher)
    page = client.get(f"/research/runs/{run.pk}/").content.decode()
    assert "7.00 × alone" in page and "does not hold" in page and "3.00 × alone" in page and "55.0 × alone" in page
    assert "<td>without_lanes</td><td>agents</td><td>33 of 33</td>" in " ".join(page.split()).replace("> <", "><")
    assert "<td>alone</td><td>agents</td>" not in " ".join(page.split()).replace("> <", "><")  # no empty rows
