"""The periodic jobs exist after migrating, and each names a function that exists."""
from __future__ import annotations

import pytest
from django.utils.module_loading import import_string
from django_q.models import Schedule

pytestmark = pytest.mark.django_db


def test_migrations_create_every_periodic_job_with_a_real_function() -> None:
    jobs = dict(Schedule.objects.values_list("func", "schedule_type"))
    assert jobs == {
        "fleet.tasks.sweep_silent_rigs": "I",
        "fleet.tasks.prune_events": "D",
        "inference.tasks.rollup_usage": "I",
        "inference.tasks.prune_request_log": "D",
        "research.tasks.nightly_baselines": "D",
        "lessons.tasks.burndown_snapshot": "D",
    }
    for func in jobs:
        assert callable(import_string(func))
