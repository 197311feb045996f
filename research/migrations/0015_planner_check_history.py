"""The twenty passes of docs/research/planner-validation.md (and their re-checks) as PlannerCheck rows,
from research/data/planner_checks.json: each pass's figures, rebuilt from its raw files (plans and
replays) before they left docs/, with the noise measured beside them and a finding each."""
from __future__ import annotations

from typing import Any

from django.db import migrations

from research.planner.validation.records import history, import_checks, remove_checks


def load(apps: Any, schema_editor: Any) -> None:
    import_checks(apps, history())


def unload(apps: Any, schema_editor: Any) -> None:
    remove_checks(apps, history())


class Migration(migrations.Migration):
    dependencies = [("research", "0014_planner_checks")]
    operations = [migrations.RunPython(load, unload)]
