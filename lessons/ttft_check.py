"""Does a TTFT a student measured match what the gateway recorded? Pure: no Django.

The student times a streamed request on their own machine (request sent -> first content
chunk, inference-notes' definition). The request log's `ttft_ms` is the gateway's view
(arrival -> first byte from the worker), so the student's number is a little larger: it adds
the network both ways and the time from the worker's first byte to the first *content* chunk.
We accept a reported value within `max(TOLERANCE_MS, TOLERANCE_RATIO x logged)` of a logged one.
"""
from __future__ import annotations

from collections.abc import Iterable

TOLERANCE_MS = 500
TOLERANCE_RATIO = 0.5
MAX_REPORTED_MS = 600_000


def tolerance_ms(logged_ms: int) -> float:
    return max(TOLERANCE_MS, TOLERANCE_RATIO * logged_ms)


def matching_ttft(reported_ms: float, logged: Iterable[tuple[int, int]]) -> int | None:
    """The id of the logged request (id, ttft_ms) closest to `reported_ms` within tolerance, or None."""
    best: tuple[float, int] | None = None
    for request_id, logged_ms in logged:
        gap = abs(reported_ms - logged_ms)
        if gap <= tolerance_ms(logged_ms) and (best is None or gap < best[0]):
            best = (gap, request_id)
    return None if best is None else best[1]
