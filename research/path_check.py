"""The pure part of `manage.py verify_path`: what one check found, the tables, the verdict,
and the small parsers the checks share. No Django, no I/O.

A check is one hop of the request path (the public URL's TLS, /healthz, a worker's /health over
the private network, a streamed completion through the gateway to one worker, …). Each has an
outcome: PASS, FAIL (the path is broken there), WARN (works, but look: a certificate close to
expiry, a stream the gateway could not be steered onto) or SKIP (not checkable with what was
given, e.g. a worker in another pool than the key's). Latencies are milliseconds.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
CERT_WARN_DAYS = 14  # Let's Encrypt renews 30 days before expiry; 14 left means renewal is failing


@dataclass(frozen=True)
class CheckResult:
    hop: str
    target: str
    outcome: str
    latency_ms: float | None = None
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome == FAIL


@dataclass(frozen=True)
class WorkerTiming:
    """One worker's row of the TTFT comparison: time to first token measured three ways.
    direct: the control plane straight to the worker (the private hop alone);
    gateway_to_worker: as the gateway logged it (request admitted to the worker's first byte);
    end_to_end: as a client of the public URL sees it (proxy, TLS and gateway included)."""

    worker: str
    state: str
    pool: str
    health_ms: float | None
    direct_ttft_ms: float | None
    gateway_to_worker_ttft_ms: float | None
    end_to_end_ttft_ms: float | None
    served_by: str
    outcome: str


@dataclass
class StreamTiming:
    """What a streamed answer looked like to its client: when the first event carrying data
    came (keep-alive comments do not count), how many reads brought data, whether it ended
    properly, and any error event."""

    ttft_ms: float | None = None
    total_ms: float | None = None
    data_events: int = 0
    finished: bool = False
    error: str = ""


def sse_data(chunk: str) -> list[str]:
    """The payloads of the `data:` lines in a piece of an event stream (comments skipped)."""
    return [line[5:].strip() for line in chunk.splitlines() if line.startswith("data:")]


def stream_error(payload: str) -> str:
    """The message of an error event (OpenAI `{"error": …}` or Anthropic `type: error`), or ""."""
    try:
        event = json.loads(payload)
    except ValueError:
        return ""
    if not isinstance(event, dict):
        return ""
    error = event.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or "error")
    return ""


def is_stream_end(payload: str) -> bool:
    """`[DONE]` (OpenAI) or a `message_stop` event (Anthropic)."""
    if payload == "[DONE]":
        return True
    try:
        event = json.loads(payload)
    except ValueError:
        return False
    return isinstance(event, dict) and event.get("type") == "message_stop"


def certificate_check(*, not_after_s: float, now_s: float, warn_days: int = CERT_WARN_DAYS) -> tuple[str, str]:
    """Outcome and detail for a certificate that verified, from its expiry (epoch seconds)."""
    days_left = (not_after_s - now_s) / 86400
    if days_left < 0:
        return FAIL, f"certificate expired {-days_left:.0f} days ago"
    if days_left < warn_days:
        return WARN, f"certificate valid, but expires in {days_left:.1f} days (renewal failing?)"
    return PASS, f"certificate valid, expires in {days_left:.0f} days"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def render_checks(results: Iterable[CheckResult]) -> str:
    return _table(["hop", "target", "result", "ms", "detail"],
                  [[r.hop, r.target, r.outcome, _ms(r.latency_ms), r.detail] for r in results])


def render_timings(timings: Iterable[WorkerTiming]) -> str:
    return _table(
        ["worker", "state", "pool", "/health ms", "direct TTFT ms", "gateway->worker TTFT ms",
         "end-to-end TTFT ms", "served by", "result"],
        [[t.worker, t.state, t.pool, _ms(t.health_ms), _ms(t.direct_ttft_ms), _ms(t.gateway_to_worker_ttft_ms),
          _ms(t.end_to_end_ttft_ms), t.served_by or "-", t.outcome] for t in timings],
    )


def verdict(results: list[CheckResult]) -> tuple[bool, str]:
    """(path works, the verdict line). The line names every broken hop."""
    failed = [r for r in results if r.failed]
    warned = [r for r in results if r.outcome == WARN]
    passed = sum(1 for r in results if r.outcome == PASS)
    if not results:
        return False, "VERDICT: FAIL - nothing was checked"
    if failed:
        broken = "; ".join(f"{r.hop} {r.target}: {r.detail}" for r in failed)
        return False, f"VERDICT: FAIL - broken hop{'s' if len(failed) > 1 else ''}: {broken}"
    if warned:
        return True, (f"VERDICT: PASS with {len(warned)} warning{'s' if len(warned) > 1 else ''} - "
                      f"{passed} checks passed; look at: " + "; ".join(f"{r.hop} {r.target}" for r in warned))
    return True, f"VERDICT: PASS - the whole path works ({passed} checks passed)"
