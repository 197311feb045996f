"""django-q2 schedules created by data migrations: each app lists (name, function, schedule
type, minutes) and gets a RunPython operation that creates them (and removes them on reverse)."""
from __future__ import annotations

from typing import Any

from django.db import migrations

ScheduleRow = tuple[str, str, str, int | None]


def schedules_operation(schedules: list[ScheduleRow]) -> migrations.RunPython:
    def create(apps: Any, schema_editor: Any) -> None:
        schedule = apps.get_model("django_q", "Schedule")
        for name, func, schedule_type, minutes in schedules:
            schedule.objects.update_or_create(
                name=name, defaults={"func": func, "schedule_type": schedule_type, "minutes": minutes, "repeats": -1}
            )

    def remove(apps: Any, schema_editor: Any) -> None:
        apps.get_model("django_q", "Schedule").objects.filter(name__in=[name for name, *_ in schedules]).delete()

    return migrations.RunPython(create, remove)
