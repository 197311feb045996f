from django.db import migrations

SCHEDULES = [
    # name, function, schedule type, minutes
    ("usage: daily roll-ups", "inference.tasks.rollup_usage", "I", 10),
    ("usage: prune old request rows", "inference.tasks.prune_request_log", "D", None),
]


def create_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, func, schedule_type, minutes in SCHEDULES:
        Schedule.objects.update_or_create(
            name=name, defaults={"func": func, "schedule_type": schedule_type, "minutes": minutes, "repeats": -1}
        )


def remove_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name__in=[name for name, *_ in SCHEDULES]).delete()


class Migration(migrations.Migration):
    dependencies = [("inference", "0001_request_log"), ("fleet", "0003_schedules")]
    operations = [migrations.RunPython(create_schedules, remove_schedules)]
