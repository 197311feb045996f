"""`manage.py bench_report`: Markdown tables and SVG plots from the JSON files of
`bench --scenario NAME --json DIR/NAME.json` (the runs' samples are read from the database)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research import report
from research.models import RequestSample


class Command(BaseCommand):
    help = "Write SVG plots and print Markdown tables for the scenario reports in a folder."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--results-dir", required=True, help="Folder of NAME.json files from bench --json.")
        parser.add_argument("--out", required=True, help="Folder for the SVG plots.")

    def handle(self, *args: Any, **options: Any) -> None:
        results, out = Path(options["results_dir"]), Path(options["out"])
        if not results.is_dir():
            raise CommandError(f"{results} is not a folder")
        out.mkdir(parents=True, exist_ok=True)
        for path in sorted(results.glob("*.json")):
            data = json.loads(path.read_text())
            name = path.stem
            levels = data.get("levels", [])
            self.stdout.write(f"\n### {name}\n")
            if levels:
                self.stdout.write(report.levels_table(levels) + "\n")
            for extra in data.get("scenario_results", []):
                rows = extra.get("engine_only") if isinstance(extra, dict) and "engine_only" in extra else None
                rows = rows if isinstance(rows, list) else [rows] if rows else None
                if rows:
                    table = report.results_table(rows, leave_out=report.ENGINE_COLUMNS_LEFT_OUT)
                    self.stdout.write("\nEngine only (llama-bench):\n\n" + table + "\n")
            plain = [r for r in data.get("scenario_results", []) if "engine_only" not in r]
            if plain:
                leave_out = report.ENGINE_COLUMNS_LEFT_OUT if name == "engine-only" else ()
                self.stdout.write("\n" + report.results_table(plain, leave_out=leave_out) + "\n")
            self._plots(name, levels, out)

    def _plots(self, name: str, levels: list[dict[str, Any]], out: Path) -> None:
        charts: dict[str, str] = {}
        if name == "concurrency-sweep" and levels:
            charts["tokens-vs-concurrency"] = report.throughput_vs_load(
                levels, title="SmolLM2 on CPU: tokens/s vs concurrency")
            charts["tpot-vs-concurrency"] = report.tpot_vs_load(levels, title="SmolLM2 on CPU: TPOT vs concurrency")
            busiest = levels[-1]
            samples = RequestSample.objects.filter(run_id=busiest["run_id"], warmup=False, ok=True)
            charts["ttft-histogram"] = report.latency_histogram(
                [s.ttft_ms for s in samples if s.ttft_ms is not None], level=busiest, key="ttft_ms",
                title=f"TTFT at {busiest['label']} (ms)")
            first = levels[0]
            first_samples = RequestSample.objects.filter(run_id=first["run_id"], warmup=False, ok=True)
            charts["inter-chunk-histogram"] = report.latency_histogram(
                [gap for s in first_samples for gap in s.inter_chunk_gaps_ms], level=first,
                key="inter_chunk_latency_ms", title=f"Gaps between chunks (inter-chunk latency) at {first['label']} (ms)")
        if name == "slots-sweep" and levels:
            charts["tokens-vs-slots"] = report.throughput_vs_load(levels, title="SmolLM2 on CPU: tokens/s vs slots (-np)")
        if name == "context-sweep" and levels:
            charts["ttft-vs-prompt"] = report.ttft_vs_prompt(levels, title="SmolLM2 on CPU: TTFT vs prompt length")
        for chart, markup in charts.items():
            target = out / f"{name}-{chart}.svg"
            target.write_text(markup + "\n")
            self.stdout.write(f"\nwrote {target}")
