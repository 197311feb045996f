"""`manage.py promote_worker NAME`: the promotion gate. Moves the worker into the pool only if
its latest benchmark run of the pool's baseline shape meets the pool's SLOs; prints the check,
and the run it judged, either way."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Pool, Worker
from research.gate import BaselineShape
from research.models import PoolSlo
from research.services import baseline_run, baseline_workload, promotion_check


class Command(BaseCommand):
    help = ("Move a (dev) worker into a pool only if its latest benchmark run of the pool's baseline shape meets "
            "that pool's SLOs.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("worker", help="The worker's name.")
        parser.add_argument("--pool", default="production")
        parser.add_argument("--bench", action="store_true", help="Run the pool's baseline workload first.")

    def handle(self, *args: Any, **options: Any) -> None:
        worker = Worker.objects.select_related("model", "pool").filter(name=options["worker"]).first()
        if worker is None:
            raise CommandError(f"no worker named {options['worker']!r}")
        pool = Pool.objects.filter(name=options["pool"]).first()
        if pool is None:
            raise CommandError(f"no pool named {options['pool']!r}")
        if options["bench"]:
            slo = PoolSlo.objects.filter(pool_id=pool.id).first()
            shape = slo.shape() if slo else BaselineShape()
            run = baseline_run(worker=worker, scenario="promotion", workload=baseline_workload(shape))
            self.stdout.write(f"baseline run {run.pk} ({shape.describe()}): {run.status}")
        check = promotion_check(worker=worker, pool=pool)
        judged = check.run
        self.stdout.write(f"judged run {judged.pk} ({judged.label or judged.load_label}, "
                          f"{judged.started_at:%Y-%m-%d %H:%M})" if judged else "judged no run")
        numbers = f"TTFT p90 {check.ttft_p90_ms} ms, TPOT p90 {check.tpot_p90_ms} ms"
        if check.passed:
            self.stdout.write(f"passed ({numbers}); {'moved to' if check.moved else 'already in'} {pool.name}")
        else:
            self.stdout.write(f"refused ({numbers}): " + "; ".join(check.reasons))
