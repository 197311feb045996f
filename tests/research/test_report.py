"""Markdown tables and plots for docs/research from bench JSON levels (no database)."""
from __future__ import annotations

from research.report import levels_table, results_table, throughput_vs_load, ttft_vs_prompt


def _level(label: str, concurrency: int, output: float, prompt: float = 256) -> dict:
    dist = {"p50": 10.0, "p90": 20.0, "p99": 30.0, "mean": 12.0}
    return {"label": label, "concurrency": concurrency, "completed": 8, "requests": 8, "ttft_ms": dist,
            "tpot_ms": dist, "inter_chunk_latency_ms": dist, "e2e_ms": dist, "request_throughput": 0.5,
            "output_throughput": output,
            "generation_rate": 30.0, "prompt_eval_rate": None, "goodput": None, "prompt_tokens_mean": prompt}


def test_levels_table_has_a_row_per_level_and_dashes_for_missing() -> None:
    table = levels_table([_level("concurrency 1", 1, 29.5), _level("concurrency 2", 2, 41.0)])
    lines = table.splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| concurrency 1 | 8/8 | 10 / 20 | 10.0 / 20.0 |") and "| 29.5 |" in lines[2]
    assert "| – |" in lines[3]  # no prompt eval rate reported
    assert "inter-chunk p90 (ms)" in lines[0] and "ITL" not in lines[0]


def test_a_report_written_before_the_rename_still_shows_its_inter_chunk_latency() -> None:
    old = _level("concurrency 1", 1, 29.5)
    old["itl_ms"] = old.pop("inter_chunk_latency_ms") | {"p90": 77.0}
    assert "| 77.0 |" in levels_table([old]).splitlines()[2]


def test_plots_draw_each_level() -> None:
    chart = throughput_vs_load([_level("c1", 1, 29.5), _level("c2", 2, 41.0)], title="t")
    assert chart.count("<circle") == 4  # two levels x (total, per request)
    yarn = ttft_vs_prompt([_level("ctx 256", 1, 1), _level("yarn x2 ctx 12000", 1, 1, prompt=12000)], title="t")
    assert "YaRN x2" in yarn and "native" in yarn
    assert results_table([{"start": 1, "time_to_healthy_s": 1.234}]).splitlines()[2] == "| 1 | 1.2 |"
