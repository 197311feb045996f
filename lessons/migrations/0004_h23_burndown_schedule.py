from __future__ import annotations

from django.db import migrations

from core.q_schedules import schedules_operation

SCHEDULES = [("lessons: burndown snapshot", "lessons.tasks.burndown_snapshot", "D", None)]


class Migration(migrations.Migration):
    dependencies = [("lessons", "0003_h23_burndown_evidence"),
                    ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")]
    operations = [schedules_operation(SCHEDULES)]
