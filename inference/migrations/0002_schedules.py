from django.db import migrations

from core.q_schedules import schedules_operation

SCHEDULES = [
    # name, function, schedule type, minutes
    ("usage: daily roll-ups", "inference.tasks.rollup_usage", "I", 10),
    ("usage: prune old request rows", "inference.tasks.prune_request_log", "D", None),
]


class Migration(migrations.Migration):
    dependencies = [("inference", "0001_request_log"), ("fleet", "0003_schedules")]
    operations = [schedules_operation(SCHEDULES)]
