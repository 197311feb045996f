"""The cold step measures a cold server: fitting the prompt generates nothing, so the measured
request is the first generation a freshly started llama-server performs (counted with the
server's own /metrics), and a run that starts the worker records how long that took."""
from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command

from fleet.local_worker import LaunchOptions
from research.models import BenchmarkRun, RequestSample
from research.scenarios import load_duration_s, local_server

pytestmark = pytest.mark.backend_neutral  # once, in the embedded pass

MODEL = "smollm2-135m-instruct"


def server_counters(base_url: str) -> dict[str, float]:
    """llama-server's Prometheus counters (`--metrics`), e.g. {'tokens_predicted_total': 4.0}."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return {name.removeprefix("llamacpp:"): float(value)
            for name, _, value in (line.partition(" ") for line in text.splitlines() if line and line[0] != "#")}


def test_one_request_no_warmup_is_the_fresh_servers_only_generation(transactional_db) -> None:  # noqa: ANN001
    with local_server(slots=1, context=2048, options=LaunchOptions(threads=1)) as (process, _):
        url = process.spec.base_url
        assert server_counters(url)["tokens_predicted_total"] == 0
        call_command("bench", "--base-url", url + "/v1", "--model", MODEL, "--requests", "1", "--warmup", "0",
                     "--prompt-tokens", "48", "--output-tokens", "4", stdout=StringIO(), stderr=StringIO())
        after = server_counters(url)
    run = BenchmarkRun.objects.get()
    sample = RequestSample.objects.get(run=run)
    assert not sample.warmup and sample.ok and sample.output_tokens == 4
    # Exactly one generation of 4 tokens, and its prompt the only one the model evaluated: the
    # prompt fitting (count_tokens) and the /props probe ran nothing.
    assert after["tokens_predicted_total"] == 4
    assert after["prompt_tokens_total"] == sample.prompt_tokens
    assert abs(sample.prompt_tokens - 48) <= 3


def test_cold_vs_warm_stores_a_cold_run_per_start_with_its_time_to_healthy(
    transactional_db, tmp_path: Path,  # noqa: ANN001
) -> None:
    report_path = tmp_path / "cold.json"
    call_command("bench", "--scenario", "cold-vs-warm", "--requests", "2", "--prompt-tokens", "20",
                 "--output-tokens", "4", "--threads", "1", "--json", str(report_path),
                 stdout=StringIO(), stderr=StringIO())
    runs = list(BenchmarkRun.objects.order_by("started_at", "id"))
    assert [run.label for run in runs] == ["start 1 cold concurrency 1", "start 1 warm concurrency 1",
                                           "start 2 cold concurrency 1", "start 2 warm concurrency 1"]
    for cold, warm in (runs[0:2], runs[2:4]):
        assert (cold.requests, cold.warmup, cold.summary["completed"]) == (1, 0, 1)
        start = cold.summary["cold_start"]
        assert 0 < start["load_duration_s"] < start["time_to_healthy_s"]
        assert "cold_start" not in warm.summary and warm.summary["completed"] == 2
    report = json.loads(report_path.read_text())
    assert [row["start"] for row in report["scenario_results"]] == [1, 2]
    assert all(row["first_ttft_ms"] > 0 and row["time_to_healthy_s"] > 0 for row in report["scenario_results"])


def test_load_duration_is_read_from_the_servers_own_log_timestamps(tmp_path: Path) -> None:
    log = tmp_path / "llama.log"
    log.write_text("0.00.011.904 I srv    load_model: loading model 'm.gguf'\n"
                   "1.02.640.399 I srv  llama_server: model loaded\n")
    assert load_duration_s(log) == 62.640399
    assert load_duration_s(tmp_path / "missing.log") is None
    (tmp_path / "empty.log").write_text("nothing here\n")
    assert load_duration_s(tmp_path / "empty.log") is None
