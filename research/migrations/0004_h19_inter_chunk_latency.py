"""The pooled gap between content chunks is inter-chunk latency (AIPerf's name; AIPerf's ITL is
this project's TPOT): the sample field and the stored summaries' key are renamed."""
from __future__ import annotations

from typing import Any

from django.db import migrations


def _rename_key(apps: Any, old: str, new: str) -> None:
    runs = apps.get_model("research", "BenchmarkRun")
    for run in runs.objects.all().only("id", "summary").iterator():
        if isinstance(run.summary, dict) and old in run.summary:
            run.summary[new] = run.summary.pop(old)
            run.save(update_fields=["summary"])


def forwards(apps: Any, schema_editor: Any) -> None:
    _rename_key(apps, "itl_ms", "inter_chunk_latency_ms")


def backwards(apps: Any, schema_editor: Any) -> None:
    _rename_key(apps, "inter_chunk_latency_ms", "itl_ms")


class Migration(migrations.Migration):
    dependencies = [("research", "0003_questions")]

    operations = [
        migrations.RenameField(model_name="requestsample", old_name="itls_ms", new_name="inter_chunk_gaps_ms"),
        migrations.RunPython(forwards, backwards),
    ]
