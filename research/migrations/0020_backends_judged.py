"""The PostgreSQL + Redis gateway judged against the embedded one (docs/performance.md, "Judged in
pairs"): each judge_backends run as it stored it, a probe run with its pairs of bench_gateway
reports and its verdicts, from research/data/backends_judged.json. Also names the probe kind for
what it holds now (every probe, not only the fair share's)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.db import migrations, models
from django.utils.dateparse import parse_datetime

ENTRIES = Path(__file__).resolve().parents[1] / "data" / "backends_judged.json"


def _entries() -> list[dict[str, Any]]:
    return json.loads(ENTRIES.read_text())


def load(apps: Any, schema_editor: Any) -> None:
    run_model = apps.get_model("research", "BenchmarkRun")
    for entry in _entries():
        run_model.objects.update_or_create(group=entry["group"], defaults={
            "kind": "probe", "scenario": "probe-backends", "label": entry["label"], "target": "gateway",
            "base_url": "", "model": "bench-replay", "prompt_tokens": 0, "output_tokens": entry["output_tokens"],
            "requests": 0, "status": "done", "started_at": parse_datetime(entry["started_at"]),
            "ended_at": parse_datetime(entry["ended_at"]), "summary": entry["summary"]})


def unload(apps: Any, schema_editor: Any) -> None:
    apps.get_model("research", "BenchmarkRun").objects.filter(group__in=[e["group"] for e in _entries()]).delete()


class Migration(migrations.Migration):
    dependencies = [("research", "0019_planner_check_local")]
    operations = [
        migrations.AlterField(
            model_name="benchmarkrun",
            name="kind",
            field=models.CharField(choices=[("level", "Load level"), ("class-replay", "Class replay"),
                                            ("probe", "Probe")], db_index=True, default="level",
                                   help_text="class-replay: `summary` is the replay's JSON (research/class_metrics.py); "
                                             "probe: a probe command's JSON (`scenario` names the probe: share_probe, "
                                             "bench_live_client, judge_backends).", max_length=16),
        ),
        migrations.RunPython(load, unload),
    ]
