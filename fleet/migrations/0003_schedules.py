from django.db import migrations

SCHEDULES = [
    # name, function, schedule type, minutes
    ("fleet: sweep silent rigs", "fleet.tasks.sweep_silent_rigs", "I", 1),
    ("fleet: prune old events", "fleet.tasks.prune_events", "D", None),
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
    dependencies = [("fleet", "0002_default_pools"), ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")]
    operations = [migrations.RunPython(create_schedules, remove_schedules)]
