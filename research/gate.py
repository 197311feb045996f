"""The promotion gate's decision: pure, no Django. A worker may join a pool only if its latest
finished run meets the pool's SLOs (TTFT p90 and TPOT p90, milliseconds)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    reasons: tuple[str, ...]


def gate_decide(
    *, slo_ttft_p90_ms: float | None, slo_tpot_p90_ms: float | None, has_run: bool,
    run_ok: bool, ttft_p90_ms: float | None, tpot_p90_ms: float | None,
) -> GateDecision:
    """Refuses, with every reason, when the pool has no SLOs, there is no finished run, or a
    measured p90 is missing or above its SLO. Equal to the SLO passes."""
    reasons: list[str] = []
    if slo_ttft_p90_ms is None or slo_tpot_p90_ms is None:
        reasons.append("the pool has no SLOs set (research: pool SLOs)")
    if not has_run:
        reasons.append("the worker has no benchmark run")
    elif not run_ok:
        reasons.append("the worker's latest run did not finish")
    else:
        for name, measured, slo in (("TTFT", ttft_p90_ms, slo_ttft_p90_ms), ("TPOT", tpot_p90_ms, slo_tpot_p90_ms)):
            if measured is None:
                reasons.append(f"{name} p90 was not measured")
            elif slo is not None and measured > slo:
                reasons.append(f"{name} p90 {measured:.1f} ms is above the SLO of {slo:g} ms")
    return GateDecision(passed=not reasons, reasons=tuple(reasons))
