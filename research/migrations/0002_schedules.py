from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django.db import migrations
from django.utils import timezone

from core.q_schedules import schedules_operation

SCHEDULES = [
    # name, function, schedule type, minutes
    ("research: nightly baselines", "research.tasks.nightly_baselines", "D", None),
]
NIGHTLY_AT = time(2, 30)  # local time: nobody in class, the rigs are idle


def run_at_night(apps: Any, schema_editor: Any) -> None:
    now = timezone.localtime()
    first = timezone.make_aware(datetime.combine(now.date(), NIGHTLY_AT))
    if first <= now:
        first += timedelta(days=1)
    apps.get_model("django_q", "Schedule").objects.filter(name=SCHEDULES[0][0]).update(next_run=first)


class Migration(migrations.Migration):
    dependencies = [("research", "0001_initial"), ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")]
    operations = [schedules_operation(SCHEDULES), migrations.RunPython(run_at_night, migrations.RunPython.noop)]
