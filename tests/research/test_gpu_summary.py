"""Per-GPU summaries of a run's telemetry (pure) and the recorder that keeps each reading once."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from research.gpu_summary import summarize_gpus


def _row(index: int, utilization: int | None, memory: int, clock: int | None, gen: int, width: int) -> dict:
    return {"rig": "rig1", "gpu_index": index, "name": "NVIDIA GeForce GTX 1070", "utilization_pct": utilization,
            "memory_used_mib": memory, "memory_total_mib": 8192, "sm_clock_mhz": clock, "pcie_gen": gen,
            "pcie_width": width, "pcie_max_gen": 3, "pcie_max_width": 16}


def test_each_gpu_gets_mean_and_max_and_its_pcie_link_now_and_at_most() -> None:
    rows = [_row(1, 10, 4000, 1500, 1, 1), _row(0, 20, 5000, 1700, 1, 16), _row(0, 60, 5100, 1900, 3, 16),
            _row(1, None, 4100, None, 1, 1)]
    first, second = summarize_gpus(rows)
    assert (first["gpu_index"], first["samples"]) == (0, 2)
    assert (first["utilization_pct_mean"], first["utilization_pct_max"]) == (40.0, 60.0)
    assert (first["memory_used_mib_mean"], first["memory_used_mib_max"], first["memory_total_mib"]) == (5050, 5100, 8192)
    assert (first["sm_clock_mhz_mean"], first["sm_clock_mhz_max"]) == (1800, 1900)
    assert (first["pcie_gen_min"], first["pcie_gen_max"], first["pcie_max_gen"], first["pcie_max_width"]) == (1, 3, 3, 16)
    # A riser holding the card at Gen1 x1 during the whole run, and a sensor missing once.
    assert (second["pcie_gen_max"], second["pcie_width_max"], second["utilization_pct_mean"]) == (1, 1, 10.0)
    assert second["sm_clock_mhz_max"] == 1500
    assert summarize_gpus([]) == []


@pytest.mark.django_db
def test_the_recorder_keeps_each_reading_once_and_none_from_before_the_run() -> None:
    from fleet.models import Gpu
    from fleet.rigs import rig_create
    from fleet.services import worker_register
    from research.services import TelemetryRecorder

    rig, _ = rig_create(name="rig1", address="127.0.0.1")
    worker = worker_register(name="w", base_url="http://127.0.0.1:9", model_id="m", pool_name="production")
    worker.rig, worker.gpu_indices = rig, [0, 1]
    worker.save(update_fields=["rig", "gpu_indices"])
    started = timezone.now()
    stale = Gpu.objects.create(rig=rig, index=0, memory_used_mib=1, sampled_at=started - timedelta(seconds=3))
    fresh = Gpu.objects.create(rig=rig, index=1, memory_used_mib=2, sampled_at=started + timedelta(seconds=1))
    recorder = TelemetryRecorder(worker=worker)
    recorder.started_at = started
    assert recorder.sample_once() == 1 and recorder.sample_once() == 0  # polled twice, read once
    stale.sampled_at, stale.utilization_pct = started + timedelta(seconds=2), 50
    stale.save(update_fields=["sampled_at", "utilization_pct"])
    assert recorder.sample_once() == 1
    assert [(row["gpu_index"], row["at"]) for row in recorder.rows] == [
        (1, fresh.sampled_at), (0, started + timedelta(seconds=2))]
