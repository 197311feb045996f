"""The "local" fair policy's check (docs/classroom.md, "Fair and fast: keeping each student's prefix
where it is"): the planner's prediction of the token-fair and the local order on the demo's two
workers, against one class replay of each, from research/data/planner_check_local.json
(planner_check's comparison, as it stored it)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import migrations

from research.planner.validation.records import history, import_checks, remove_checks

ENTRIES = Path(__file__).resolve().parents[1] / "data" / "planner_check_local.json"


def load(apps: Any, schema_editor: Any) -> None:
    import_checks(apps, history(ENTRIES))


def unload(apps: Any, schema_editor: Any) -> None:
    remove_checks(apps, history(ENTRIES))


class Migration(migrations.Migration):
    dependencies = [("research", "0018_planner_check_lanes")]
    operations = [migrations.RunPython(load, unload)]
