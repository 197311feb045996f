"""Per-GPU summaries of the telemetry taken during a run: pure, no Django.

One entry per GPU (rig, index), from the samples the agent took while the run went on (each
sample once, dated by when the agent read it): mean and max utilization, memory used and SM
clock, the lowest and highest PCIe link the card ran at beside the maximum it can train to (a
riser that holds a card at Gen1 x1 shows as pcie_gen_max 1 with pcie_max_gen 3).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def _present(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [float(row[key]) for row in rows if isinstance(row.get(key), (int, float))]


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def _most(values: Sequence[float]) -> float | None:
    return max(values) if values else None


def _least(values: Sequence[float]) -> float | None:
    return min(values) if values else None


def _last(rows: Sequence[Mapping[str, Any]], key: str) -> Any:
    return next((row[key] for row in reversed(rows) if row.get(key) is not None), None)


def summarize_gpus(samples: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`samples`: rows with rig, gpu_index, name and the telemetry fields (None where a card does
    not report one). Returns one dict per GPU, ordered by rig and index; [] with no samples."""
    by_gpu: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for row in samples:
        by_gpu[(str(row.get("rig") or ""), int(row["gpu_index"]))].append(row)
    summaries = []
    for (rig, index), rows in sorted(by_gpu.items()):
        utilization = _present(rows, "utilization_pct")
        memory = _present(rows, "memory_used_mib")
        clocks = _present(rows, "sm_clock_mhz")
        generations = _present(rows, "pcie_gen")
        widths = _present(rows, "pcie_width")
        summaries.append({
            "rig": rig, "gpu_index": index, "name": _last(rows, "name") or "", "samples": len(rows),
            "utilization_pct_mean": _mean(utilization), "utilization_pct_max": _most(utilization),
            "memory_used_mib_mean": _mean(memory), "memory_used_mib_max": _most(memory),
            "memory_total_mib": _last(rows, "memory_total_mib"),
            "sm_clock_mhz_mean": _mean(clocks), "sm_clock_mhz_max": _most(clocks),
            "pcie_gen_min": _least(generations), "pcie_gen_max": _most(generations),
            "pcie_width_min": _least(widths), "pcie_width_max": _most(widths),
            "pcie_max_gen": _last(rows, "pcie_max_gen"), "pcie_max_width": _last(rows, "pcie_max_width"),
        })
    return summaries
