"""The promotion gate's decision: pure, no Django. A worker may join a pool only if its latest
finished run of the pool's declared baseline shape meets the pool's SLOs (TTFT p90 and TPOT p90,
milliseconds). A run of any other shape (a 12k-context sweep, a 2-token run, a rate sweep) says
nothing about the SLOs and is never judged."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BaselineShape:
    """The workload a pool's SLOs are stated for: prompt and output tokens as asked for, closed
    loop at `concurrency`, at least `min_requests` measured requests."""

    prompt_tokens: int = 256
    output_tokens: int = 64
    concurrency: int = 1
    min_requests: int = 8

    def describe(self) -> str:
        return (f"{self.prompt_tokens} in / {self.output_tokens} out, concurrency {self.concurrency}, "
                f"at least {self.min_requests} requests")

    def mismatches(self, *, prompt_tokens: int, output_tokens: int, concurrency: int | None,
                   request_rate: float | None, requests: int) -> list[str]:
        """How a run differs from the shape; [] when it is of the shape."""
        differs = []
        if prompt_tokens != self.prompt_tokens:
            differs.append(f"{prompt_tokens} prompt tokens, not {self.prompt_tokens}")
        if output_tokens != self.output_tokens:
            differs.append(f"{output_tokens} output tokens, not {self.output_tokens}")
        if request_rate is not None or concurrency != self.concurrency:
            load = f"rate {request_rate:g}/s" if request_rate is not None else f"concurrency {concurrency}"
            differs.append(f"{load}, not concurrency {self.concurrency}")
        if requests < self.min_requests:
            differs.append(f"{requests} requests, fewer than {self.min_requests}")
        return differs


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
        reasons.append("the worker has no benchmark run of the pool's baseline shape")
    elif not run_ok:
        reasons.append("the worker's latest run did not finish")
    else:
        for name, measured, slo in (("TTFT", ttft_p90_ms, slo_ttft_p90_ms), ("TPOT", tpot_p90_ms, slo_tpot_p90_ms)):
            if measured is None:
                reasons.append(f"{name} p90 was not measured")
            elif slo is not None and measured > slo:
                reasons.append(f"{name} p90 {measured:.1f} ms is above the SLO of {slo:g} ms")
    return GateDecision(passed=not reasons, reasons=tuple(reasons))
