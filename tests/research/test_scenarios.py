"""Scenarios launch their own llama-server configurations (kept tiny here) and llama-bench."""
from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

from django.core.management import call_command

from research.models import BenchmarkRun
from research.scenarios import llama_bench

pytestmark = pytest.mark.backend_neutral  # once, in the embedded pass


def test_slots_sweep_launches_one_server_per_slot_count_and_stores_its_launch(
    transactional_db, tmp_path: Path,  # noqa: ANN001
) -> None:
    report_path = tmp_path / "slots.json"
    call_command("bench", "--scenario", "slots-sweep", "--concurrency", "1,2", "--requests", "2", "--warmup", "0",
                 "--prompt-tokens", "32", "--output-tokens", "4", "--threads", "1", "--json", str(report_path),
                 stdout=StringIO(), stderr=StringIO())
    runs = list(BenchmarkRun.objects.order_by("started_at", "id"))
    assert [(run.launch["slots"], run.concurrency, run.scenario) for run in runs] == [
        (1, 1, "slots-sweep"), (2, 2, "slots-sweep")]
    assert len({run.group for run in runs}) == 1 and len({run.base_url for run in runs}) == 2
    assert all("--parallel" in run.launch["argv"] and run.launch["threads"] == 1 for run in runs)
    report = json.loads(report_path.read_text())
    assert [level["label"] for level in report["levels"]] == ["np=1 concurrency 1", "np=2 concurrency 2"]
    assert all(level["completed"] == 2 for level in report["levels"])


def test_llama_bench_reports_engine_only_rates() -> None:
    result = llama_bench(pp=16, tg=4, threads=1, repetitions=1)
    assert result["pp16"] > 0 and result["tg4"] > 0 and result["tool"] == "llama-bench"
