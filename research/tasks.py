"""django-q2 entry points. The nightly baseline is scheduled by migration research/0002;
`manage.py qcluster` runs it."""
from __future__ import annotations

import logging

from django.conf import settings

from fleet.models import Worker
from research.services import BASELINE, Workload, baseline_run

log = logging.getLogger(__name__)


def nightly_baselines(*, workload: Workload = BASELINE) -> list[int]:
    """One baseline run (default: 256 in / 64 out, 8 requests, one stream) per healthy worker of
    the production (default) pool; a worker that fails its run is recorded as a failed run and
    the others still run. Returns the run ids."""
    run_ids: list[int] = []
    workers = Worker.objects.filter(pool__name=settings.OCS["DEFAULT_POOL"], state=Worker.State.HEALTHY)
    for worker in workers.select_related("model", "pool"):
        try:
            run_ids.append(baseline_run(worker=worker, workload=workload).pk)
        except Exception:  # the run row already says failed and why; go on with the next worker
            log.exception("nightly baseline of %s failed", worker.name)
    return run_ids
