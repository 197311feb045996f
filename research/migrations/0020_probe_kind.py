"""The probe kind named for what it holds now: every probe command's runs (share_probe,
bench_live_client, judge_backends), not only the fair share's."""
from __future__ import annotations

from django.db import migrations, models


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
    ]
