"""Metric maths against streams computed by hand (no database, no server)."""
from __future__ import annotations

import pytest

from research.metrics import RequestTiming, Slo, parse_slo, percentile, summarize

# A: sent at 0, four content chunks, 4 tokens: TTFT 500 ms, E2E 1200 ms,
#    TPOT (1200 - 500) / 3 = 233.33 ms, gaps 100, 200, 300 ms.
A = RequestTiming(sent_s=0.0, chunk_times_s=(0.5, 0.6, 0.8, 1.1), end_s=1.2, output_tokens=4, prompt_tokens=10)
# B: one output token: TTFT 200 ms, no TPOT, no gaps.
B = RequestTiming(sent_s=1.0, chunk_times_s=(1.2,), end_s=1.25, output_tokens=1, prompt_tokens=10)
# C: two tokens: TTFT 1000 ms, TPOT (1500 - 1000) / 1 = 500 ms, one gap of 500 ms.
C = RequestTiming(sent_s=0.0, chunk_times_s=(1.0, 1.5), end_s=1.5, output_tokens=2, prompt_tokens=10)
FAILED = RequestTiming(sent_s=0.0, chunk_times_s=(), end_s=0.3, output_tokens=0, ok=False)


def test_per_request_ttft_tpot_e2e_and_gaps() -> None:
    assert A.ttft_s == pytest.approx(0.5)
    assert A.e2e_s == pytest.approx(1.2)
    assert A.tpot_s == pytest.approx(0.7 / 3)
    assert A.inter_chunk_gaps_s == pytest.approx([0.1, 0.2, 0.3])
    assert B.tpot_s is None  # one output token: no time per output token, as vLLM
    assert B.inter_chunk_gaps_s == []


def test_summary_pools_gaps_across_requests_and_skips_one_token_tpot() -> None:
    summary = summarize([A, B, C, FAILED], duration_s=2.0)
    assert (summary.completed, summary.failed) == (3, 1)
    # Pooled ITL [100, 200, 300, 500]: p50 250, p90 at rank 2.7 -> 300 + 0.7 * 200 = 440, mean 275.
    assert summary.inter_chunk_latency_ms.count == 4
    assert summary.inter_chunk_latency_ms.p50 == pytest.approx(250)
    assert summary.inter_chunk_latency_ms.p90 == pytest.approx(440)
    assert summary.inter_chunk_latency_ms.mean == pytest.approx(275)
    # TPOT only from A and C: [233.33, 500].
    assert summary.tpot_ms.count == 2
    assert summary.tpot_ms.mean == pytest.approx((700 / 3 + 500) / 2)
    # TTFT from all three completed: [500, 200, 1000].
    assert summary.ttft_ms.p50 == pytest.approx(500)
    assert summary.ttft_ms.mean == pytest.approx(1700 / 3)
    # E2E [1200, 250, 1500] sorted [250, 1200, 1500]: p99 at rank 1.98 -> 1200 + 0.98 * 300.
    assert summary.e2e_ms.p99 == pytest.approx(1200 + 300 * 0.98)
    assert summary.request_throughput == pytest.approx(1.5)
    assert summary.output_throughput == pytest.approx(3.5)  # (4 + 1 + 2) tokens / 2 s
    assert summary.goodput is None


def test_goodput_counts_requests_meeting_every_slo() -> None:
    slo = parse_slo("ttft:600,tpot:300")
    assert slo == Slo(ttft_ms=600, tpot_ms=300)
    summary = summarize([A, B, C, FAILED], duration_s=2.0, slo=slo)
    # A meets both; B meets TTFT and has no TPOT to miss; C misses both; FAILED fails.
    assert summary.good_requests == 2
    assert summary.goodput == pytest.approx(1.0)
    assert slo.misses(C) == ["ttft 1000 ms > 600 ms", "tpot 500.0 ms > 300 ms"]
    assert parse_slo("tpot:200").misses(A) == ["tpot 233.3 ms > 200 ms"]


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 99) == 10
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == pytest.approx(9.1)


@pytest.mark.parametrize("text", ["", "ttft", "ttft:abc", "latency:5", "tpot:-1", "ttft:nan"])
def test_bad_slo_text_is_a_plain_error(text: str) -> None:
    with pytest.raises(ValueError, match="goodput SLO"):
        parse_slo(text)


def test_empty_level_has_no_percentiles() -> None:
    summary = summarize([FAILED], duration_s=1.0, slo=Slo(ttft_ms=100))
    assert summary.ttft_ms.p50 is None and summary.completed == 0 and summary.goodput == 0


def test_stored_runs_get_the_inter_chunk_latency_key_back_and_forth(db) -> None:  # noqa: ANN001
    import importlib

    from django.apps import apps

    from research.models import BenchmarkRun

    migration = importlib.import_module("research.migrations.0004_h19_inter_chunk_latency")
    gaps = {"p50": 9.0, "p90": 12.0, "p99": 20.0, "mean": 10.0}
    run = BenchmarkRun.objects.create(group="g", target="worker", base_url="http://w", model="m", prompt_tokens=1,
                                      output_tokens=2, requests=1, summary={"itl_ms": gaps, "tpot_ms": gaps})
    migration.forwards(apps, None)
    run.refresh_from_db()
    assert run.summary == {"inter_chunk_latency_ms": gaps, "tpot_ms": gaps}
    migration.backwards(apps, None)
    run.refresh_from_db()
    assert run.summary == {"itl_ms": gaps, "tpot_ms": gaps}
