"""The pure part of verify_path: the verdict names every broken hop, certificate expiry
thresholds, and reading event streams."""
from __future__ import annotations

from research.path_check import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    CheckResult,
    WorkerTiming,
    certificate_check,
    is_stream_end,
    render_checks,
    render_timings,
    sse_data,
    stream_error,
    verdict,
)

DAY = 86400.0


def test_verdict_passes_only_when_nothing_failed() -> None:
    ok, line = verdict([CheckResult("public", "/healthz", PASS), CheckResult("anthropic", "/v1/messages", SKIP)])
    assert ok and line.startswith("VERDICT: PASS")


def test_verdict_names_every_broken_hop() -> None:
    results = [
        CheckResult("public", "/healthz", PASS),
        CheckResult("worker /health (private)", "rig2-a", FAIL, detail="ConnectError"),
        CheckResult("gateway -> worker stream", "rig2-a", FAIL, detail="failed over to rig1-a"),
    ]
    ok, line = verdict(results)
    assert not ok
    assert line.startswith("VERDICT: FAIL - broken hops:")
    assert "worker /health (private) rig2-a: ConnectError" in line
    assert "gateway -> worker stream rig2-a: failed over to rig1-a" in line


def test_warnings_pass_but_are_named() -> None:
    ok, line = verdict([CheckResult("public TLS", "ai:443", WARN, detail="expires in 3 days"),
                        CheckResult("public", "/healthz", PASS)])
    assert ok
    assert "1 warning" in line and "public TLS ai:443" in line


def test_nothing_checked_is_not_a_pass() -> None:
    assert verdict([])[0] is False


def test_certificate_expiry_thresholds() -> None:
    assert certificate_check(not_after_s=100 * DAY, now_s=0)[0] == PASS
    assert certificate_check(not_after_s=3 * DAY, now_s=0)[0] == WARN
    outcome, detail = certificate_check(not_after_s=0, now_s=2 * DAY)
    assert outcome == FAIL and "expired 2 days ago" in detail


def test_sse_reading_skips_keepalive_comments_and_knows_both_ends() -> None:
    chunk = ': waiting for a free worker\n\ndata: {"choices": []}\n\ndata: [DONE]\n\n'
    assert sse_data(chunk) == ['{"choices": []}', "[DONE]"]
    assert sse_data(": waiting for a free worker\n\n") == []
    assert is_stream_end("[DONE]") and is_stream_end('{"type": "message_stop"}')
    assert not is_stream_end('{"type": "content_block_delta"}') and not is_stream_end("not json")


def test_error_events_of_both_dialects_are_recognised() -> None:
    assert stream_error('{"error": {"message": "the worker stopped mid-answer", "type": "upstream_error"}}') == \
        "the worker stopped mid-answer"
    assert stream_error('{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}') == "busy"
    assert stream_error('{"choices": [{"delta": {"content": "hi"}}]}') == ""
    assert stream_error("[DONE]") == ""


def test_tables_line_up_and_show_missing_latencies_as_dashes() -> None:
    table = render_checks([CheckResult("public", "/healthz", PASS, 12.4, "200"),
                           CheckResult("worker /health (private)", "rig1-a", FAIL, None, "refused")])
    lines = table.splitlines()
    assert lines[0].split() == ["hop", "target", "result", "ms", "detail"]
    assert lines[2].split()[:4] == ["public", "/healthz", "PASS", "12"]
    assert " - " in lines[3]
    column = lines[0].index("result")
    assert [line[column:column + 4] for line in lines[2:]] == ["PASS", "FAIL"]
    timings = render_timings([WorkerTiming("rig1-a", "healthy", "production", 3.0, 120.0, 131.0, 150.0, "rig1-a",
                                           PASS)])
    assert "gateway->worker TTFT ms" in timings and "end-to-end TTFT ms" in timings
    assert timings.splitlines()[2].split() == ["rig1-a", "healthy", "production", "3", "120", "131", "150",
                                               "rig1-a", "PASS"]


def test_lending_pools_count_only_when_the_keys_pool_has_no_routable_worker() -> None:
    from research.path_verify import KeyOwner, WorkerRow, pools_for

    production, dev = 1, 2
    owner = KeyOwner(user_id=7, pool_id=production, pool="production")
    rig1_a = WorkerRow(id=1, name="rig1-a", base_url="http://a", state="healthy", pool_id=production, pool="production",
                       model_id="m")
    rig1_b = WorkerRow(id=2, name="rig1-b", base_url="http://b", state="healthy", pool_id=dev, pool="dev", model_id="m")
    assert pools_for(owner, "m", [rig1_a, rig1_b], {dev}) == {production}  # rig1-b unreachable with this key
    down = WorkerRow(**{**rig1_a.__dict__, "state": "down"})
    assert pools_for(owner, "m", [down, rig1_b], {dev}) == {production, dev}  # production borrows dev
    assert pools_for(owner, "m", [down, rig1_b], set()) == {production}
