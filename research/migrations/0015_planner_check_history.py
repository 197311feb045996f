"""The twenty passes of docs/research/planner-validation.md (and their re-checks) as PlannerCheck rows,
from research/data/planner_checks.json: each pass's figures, rebuilt from its raw files (plans and
replays) before they left docs/, with the noise measured beside them and a finding each."""
from __future__ import annotations

from typing import Any

from django.db import migrations

from research.planner.validation.records import check_fields, figure_rows, history


def load(apps: Any, schema_editor: Any) -> None:
    check_model = apps.get_model("research", "PlannerCheck")
    figure_model = apps.get_model("research", "PlannerCheckFigure")
    for entry in history():
        fields = check_fields(entry)
        check, _ = check_model.objects.update_or_create(name=fields.pop("name"), defaults=fields)
        check.figures.all().delete()
        figure_model.objects.bulk_create(figure_model(planner_check=check, **row)
                                         for row in figure_rows(entry["comparison"]))


def unload(apps: Any, schema_editor: Any) -> None:
    apps.get_model("research", "PlannerCheck").objects.filter(name__in=[e["name"] for e in history()]).delete()


class Migration(migrations.Migration):
    dependencies = [("research", "0014_planner_checks")]
    operations = [migrations.RunPython(load, unload)]
