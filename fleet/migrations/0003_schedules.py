from django.db import migrations

from core.q_schedules import schedules_operation

SCHEDULES = [
    # name, function, schedule type, minutes
    ("fleet: sweep silent rigs", "fleet.tasks.sweep_silent_rigs", "I", 1),
    ("fleet: prune old events", "fleet.tasks.prune_events", "D", None),
]


class Migration(migrations.Migration):
    dependencies = [("fleet", "0002_default_pools"), ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")]
    operations = [schedules_operation(SCHEDULES)]
