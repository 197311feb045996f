"""`manage.py bench_gateway`: the replay upstream's wire (as the official OpenAI SDK reads it),
the report's arithmetic, and one tiny end-to-end run through a real gateway process."""
from __future__ import annotations

import asyncio
import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from io import StringIO
from pathlib import Path

import httpx
import openai
import pytest
from django.core.management import call_command

from fleet.local_worker import free_port
from research.gateway_bench.client import ChatTarget, Endpoint, RoundResult, run_requests, run_round
from research.gateway_bench.run import GatewayCounters
from research.gateway_bench.summary import (
    CONSUMER_HOP,
    DIRECT,
    REFERENCE,
    LevelStats,
    RoundStats,
    answer_lines,
    check_goals,
    goal_lines,
    percentile,
    ratio,
    ratio_lines,
    ratios,
    step_lines,
)

pytestmark = pytest.mark.backend_neutral  # once, in the embedded pass

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 6


@pytest.fixture(scope="module")
def replay() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "research.gateway_bench.replay", "--port", str(port), "--tokens", str(TOKENS),
         "--token-ms", "1", "--slots", "3"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_replay_streams_the_configured_tokens_and_usage_to_the_openai_sdk(replay: str) -> None:
    client = openai.OpenAI(base_url=replay + "/v1", api_key="unused")
    contents, finish, usage = [], None, None
    for chunk in client.chat.completions.create(model="bench-replay", stream=True,
                                                messages=[{"role": "user", "content": "two words"}]):
        if chunk.choices and chunk.choices[0].delta.content:
            contents.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
        usage = chunk.usage or usage
    assert len(contents) == TOKENS
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == TOKENS
    assert usage.total_tokens == usage.prompt_tokens + TOKENS


def test_replay_answers_what_register_worker_and_the_monitor_probe(replay: str) -> None:
    assert httpx.get(replay + "/health").json() == {"status": "ok"}
    props = httpx.get(replay + "/props").json()
    assert props["total_slots"] == 3 and props["default_generation_settings"]["n_ctx"] > 0
    assert [slot["is_processing"] for slot in httpx.get(replay + "/slots").json()] == [False, False, False]
    assert httpx.get(replay + "/v1/models").json()["data"][0]["id"] == "bench-replay"
    client = openai.OpenAI(base_url=replay + "/v1", api_key="unused")
    answer = client.chat.completions.create(model="bench-replay", max_tokens=2,
                                            messages=[{"role": "user", "content": "hi"}])
    assert answer.usage is not None and answer.usage.completion_tokens == 2
    assert httpx.get(replay + "/nowhere").status_code == 404


def test_load_generator_counts_every_chunk_on_reused_connections(replay: str) -> None:
    async def measure() -> tuple[RoundResult, RoundResult]:
        target = ChatTarget(DIRECT, [Endpoint.parse(replay)],
                            body={"model": "bench-replay", "messages": [{"role": "user", "content": "x"}],
                                  "stream": True})
        try:
            timed = await run_round(target, streams=2, duration_s=0.3)
            counted = await run_requests(target, concurrency=3, requests=7)
        finally:
            target.close()
        return timed, counted

    timed, counted = asyncio.run(measure())
    assert timed.errors == 0 and timed.completions > 2
    assert timed.content_chunks == TOKENS * timed.completions
    assert len(timed.ttft_ms) == timed.completions and all(t > 0 for t in timed.ttft_ms)
    assert len(timed.last_token_ms) == len(timed.after_last_token_ms) == timed.completions
    assert all(last >= first for last, first in zip(timed.last_token_ms, timed.ttft_ms))
    assert all(after >= 0 for after in timed.after_last_token_ms)
    assert (counted.completions, counted.errors) == (7, 0)


def test_the_wait_after_the_last_token_is_measured_apart_from_the_answer() -> None:
    """A server that keeps the response open for 0.3 s after its answer and [DONE] (as a gateway
    settling a request would): the wait shows after the last token, not in it."""
    async def slow_end(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)  # the body: {}
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for event in (b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n', b"data: [DONE]\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def one() -> RoundResult:
        server = await asyncio.start_server(slow_end, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        target = ChatTarget(DIRECT, [Endpoint("127.0.0.1", port)], body={})
        try:
            return await run_requests(target, concurrency=1, requests=1)
        finally:
            target.close()
            server.close()

    measured = asyncio.run(one())
    assert measured.completions == 1
    assert measured.last_token_ms[0] < 250 <= measured.after_last_token_ms[0]


def test_a_refused_request_is_an_error_with_its_status(replay: str) -> None:
    async def one() -> str:
        target = ChatTarget(DIRECT, [Endpoint.parse(replay)], body={"stream": True}, path="/v1/nowhere")
        try:
            result = await target.stream()
        finally:
            target.close()
        assert not result.ok
        return result.error

    assert asyncio.run(one()).startswith("status 404")


def _level(target: str, *rounds: tuple[float, float, float], upstream: str = "replay", streams: int = 1,
           errors: int = 0, cpu: float = math.nan) -> LevelStats:
    return LevelStats(upstream, streams, target, tuple(
        RoundStats(ttft_p50_ms=p50, ttft_p99_ms=p99, completions_per_s=rate, chunks_per_s=rate * 64,
                   completions=int(rate), errors=errors, duration_s=1.0, server_cpu_percent=cpu)
        for p50, p99, rate in rounds))


@pytest.mark.parametrize("module", ["reference_hop", "consumer_hop"])
def test_the_reference_hops_stream_the_upstreams_answer_to_the_openai_sdk(replay: str, module: str) -> None:
    """The bare ASGI hop, and the same hop as a Channels AsyncHttpConsumer (--consumer-hop)."""
    port = free_port()
    hop = subprocess.Popen([sys.executable, "-m", f"research.gateway_bench.{module}", "--port", str(port),
                            "--upstream", replay], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        chunks = list(client.chat.completions.create(model="replay", messages=[{"role": "user", "content": "hi"}],
                                                      stream=True, stream_options={"include_usage": True}))
        direct = list(openai.OpenAI(base_url=replay + "/v1", api_key="none", max_retries=0).chat.completions.create(
            model="replay", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text and text == "".join(c.choices[0].delta.content or "" for c in direct if c.choices)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == TOKENS
        missing = httpx.post(f"http://127.0.0.1:{port}/v1/nowhere", json={}, timeout=5)
        assert missing.status_code == 404  # the upstream's status passes through
    finally:
        hop.terminate()
        hop.wait(timeout=10)


def test_gateways_are_compared_with_direct_and_with_the_reference_hop() -> None:
    direct = _level(DIRECT, (5.0, 6.0, 100.0))
    hop = _level(REFERENCE, (5.5, 7.0, 99.0), cpu=20.0)
    consumer = _level(CONSUMER_HOP, (5.8, 8.0, 98.0), cpu=25.0)
    gateway = _level("gateway uvicorn x1", (6.2, 9.0, 97.0), cpu=30.0)
    found = {(r.target, r.baseline): r for r in ratios([direct, hop, consumer, gateway])}
    assert set(found) == {(REFERENCE, DIRECT), (CONSUMER_HOP, DIRECT), (CONSUMER_HOP, REFERENCE),
                          ("gateway uvicorn x1", DIRECT), ("gateway uvicorn x1", REFERENCE)}
    assert found[(CONSUMER_HOP, REFERENCE)].ttft_added_p50_ms == pytest.approx(0.3)  # the consumer, over the bare hop
    over_hop = found[("gateway uvicorn x1", REFERENCE)]
    assert over_hop.ttft_added_p50_ms == pytest.approx(0.7) and over_hop.completions_ratio == pytest.approx(97 / 99)
    assert over_hop.cpu_per_chunk_ratio == pytest.approx((30.0 / (97 * 64)) / (20.0 / (99 * 64)))
    checks = {(c.ratio.target, c.goal.what): c.met for c in check_goals(list(found.values()))}
    assert checks[("gateway uvicorn x1", "TTFT added over the reference hop p50")] is False  # 0.7 > 0.5
    assert checks[("gateway uvicorn x1", "TTFT added over the reference hop p99")] is True  # 2.0 ≤ 3
    assert not any(target in (REFERENCE, CONSUMER_HOP) for target, _ in checks)  # the hops are not judged
    assert any("of reference hop" in line and "CPU per chunk" in line for line in ratio_lines(list(found.values())))


def test_step_times_are_the_mean_per_request_between_two_scrapes() -> None:
    before = GatewayCounters(round_trips=0.0, step_seconds={"authenticated": 1.0}, step_counts={"authenticated": 10})
    after = GatewayCounters(round_trips=8.0, step_seconds={"authenticated": 1.5, "admitted": 0.2},
                            step_counts={"authenticated": 110, "admitted": 100})
    assert after.step_ms_since(before) == pytest.approx({"authenticated": 5.0, "admitted": 2.0})
    rounds = tuple(replace(_level("gateway uvicorn x1", (6.0, 9.0, 97.0)).rounds[0], step_ms=(("admitted", ms),))
                   for ms in (1.0, 3.0, 2.0))
    level = LevelStats("replay", 32, "gateway uvicorn x1", rounds)
    assert step_lines([level]) == ["  steps, gateway uvicorn x1 (mean ms from the step before): admitted 2.00"]


def test_the_whole_answer_is_printed_as_its_last_token_and_the_wait_after_it() -> None:
    levels = [LevelStats("replay", 32, name, tuple(
        replace(_level(name, (6.0, 9.0, 97.0)).rounds[0], last_token_p50_ms=last, after_last_token_p50_ms=after)
        for last, after in rounds)) for name, rounds in (
            ("direct", [(320.0, 0.01), (322.0, 0.03), (321.0, 0.02)]),
            ("gateway uvicorn x1", [(330.0, 0.6), (331.0, 0.7), (329.0, 0.5)]))]
    assert answer_lines(levels) == ["  whole answer p50 ms (to the last token + from it to the response's end): "
                                    "direct 321.0 + 0.02, gateway uvicorn x1 330.0 + 0.60"]
    assert levels[1].as_dict()["after_last_token_p50_ms"] == pytest.approx(0.6)
    assert answer_lines([_level("direct", (6.0, 9.0, 97.0))]) == []  # rounds that measured no answer

    # With the server's CPU measured: its CPU per completion, and the kernel's part of it.
    busy = [LevelStats("replay", 32, "gateway uvicorn x1", tuple(
        replace(_level("gateway uvicorn x1", (6.0, 9.0, 100.0)).rounds[0], server_cpu_percent=cpu,
                server_system_percent=system, last_token_p50_ms=330.0)
        for cpu, system in ((50, 10), (40, 12), (60, 8))))]
    assert answer_lines(busy)[1] == ("  CPU per completion, ms (of it in the kernel): "
                                     "gateway uvicorn x1 5.00 (1.00 in the kernel)")
    assert busy[0].as_dict()["server_system_percent"] == 10


def test_the_redis_round_trips_are_timed_by_operation_and_printed_under_the_steps() -> None:
    before = GatewayCounters(round_trips=0.0, step_seconds={"admitted": 0.1}, step_counts={"admitted": 10},
                             trip_seconds={("view", "all"): 0.05, ("view", "reply"): 0.02, ("view", "resume"): 0.02},
                             trip_counts={("view", "all"): 10, ("view", "reply"): 10, ("view", "resume"): 10})
    after = GatewayCounters(round_trips=40.0, step_seconds={"admitted": 0.3}, step_counts={"admitted": 20},
                            trip_seconds={("view", "all"): 0.09, ("view", "reply"): 0.04, ("view", "resume"): 0.03,
                                          ("finish", "all"): 0.01},
                            trip_counts={("view", "all"): 20, ("view", "reply"): 20, ("view", "resume"): 20,
                                         ("finish", "all"): 4})
    means = after.step_ms_since(before)
    assert means == pytest.approx({"admitted": 20.0, "trip view all": 4.0, "trip view reply": 2.0,
                                   "trip view resume": 1.0, "trip finish all": 2.5})
    level = LevelStats("replay", 32, "gateway uvicorn x1",
                       (replace(_level("gateway uvicorn x1", (6.0, 9.0, 97.0)).rounds[0], step_ms=tuple(means.items())),))
    assert step_lines([level]) == [
        "  steps, gateway uvicorn x1 (mean ms from the step before): admitted 20.00",
        "  Redis round trips, gateway uvicorn x1 (mean ms each = waiting for the reply + for the event loop + the rest): "
        "view 4.00 = 2.00 + 1.00 + 1.00, finish 2.50"]


def test_the_metrics_of_each_gateway_process_are_read_and_summed() -> None:
    from research.gateway_bench.run import counters_of
    first = ('ocs_live_state_round_trips_total{op="view"} 3.0\n'
             'ocs_request_step_seconds_sum{step="admitted"} 0.5\n'
             'ocs_request_step_seconds_count{step="admitted"} 10.0\n'
             'ocs_live_state_round_trip_seconds_sum{op="admit_seen",part="resume"} 1.5\n'
             'ocs_live_state_round_trip_seconds_count{op="admit_seen",part="resume"} 6.0\n')
    second = ('ocs_live_state_round_trips_total{op="finish"} 2.0\n'
              'ocs_live_state_round_trip_seconds_sum{part="resume",op="admit_seen"} 0.5\n'  # labels in any order
              'ocs_live_state_round_trip_seconds_count{part="resume",op="admit_seen"} 4.0\n')
    counters = counters_of([first, second])
    assert counters.round_trips == 5.0
    assert counters.step_seconds == {"admitted": 0.5} and counters.step_counts == {"admitted": 10.0}
    assert counters.trip_seconds == {("admit_seen", "resume"): 2.0}
    assert counters.trip_counts == {("admit_seen", "resume"): 10.0}


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([float(v) for v in range(1, 101)], 99) == pytest.approx(99.01)
    assert math.isnan(percentile([], 50))


def test_ratios_use_medians_over_rounds() -> None:
    direct = _level(DIRECT, (10.0, 20.0, 100.0), (11.0, 22.0, 90.0), (12.0, 21.0, 110.0))
    gateway = _level("gateway daphne x1", (11.0, 24.0, 99.0), (12.5, 30.0, 80.0), (13.0, 23.0, 95.0))
    measured = ratio(direct, gateway)
    assert measured.completions_ratio == pytest.approx(95.0 / 100.0)
    assert measured.ttft_added_p50_ms == pytest.approx(12.5 - 11.0)
    assert measured.ttft_added_p99_ms == pytest.approx(24.0 - 21.0)


def test_goals_are_judged_only_at_the_levels_that_ran_and_errors_fail_the_128_stream_goal() -> None:
    at_one = ratio(_level(DIRECT, (5.0, 6.0, 100.0)), _level("gateway uvicorn x1", (6.0, 10.0, 99.0)))
    at_128 = ratio(_level(DIRECT, (5.0, 6.0, 100.0), streams=128),
                   _level("gateway uvicorn x1", (6.0, 10.0, 95.0), streams=128, errors=1))
    checks = {check.goal.what: check.met for check in check_goals([at_one, at_128])}
    assert checks == {"TTFT added p50": True, "TTFT added p99": True, "completions/s ratio, no errors": False}
    lines = goal_lines(check_goals([at_one]))
    assert "  replay 1 stream, gateway uvicorn x1: TTFT added p50 +1.00 ms (target ≤ 1.5 ms, issue 13): met" in lines


def test_a_level_with_no_completions_is_not_met_and_prints_na() -> None:
    silent = ratio(_level(DIRECT, (math.nan, math.nan, 0.0)), _level("gateway daphne x1", (math.nan, math.nan, 0.0)))
    assert not any(check.met for check in check_goals([silent]))
    assert "completions/s n/a of direct" in ratio_lines([silent])[1]


RATIO_LINE = re.compile(r"ratio replay (1 stream|2 streams), gateway daphne x1: completions/s (\d+\.\d+) of direct, "
                        r"TTFT added p50 [+-]\d+\.\d+ ms, p99 [+-]\d+\.\d+ ms, errors 0 \(direct 0\)")


@pytest.mark.integration
def test_bench_gateway_end_to_end_prints_ratios_with_no_errors(tmp_path: Path) -> None:
    report_path = tmp_path / "bench.json"
    out = StringIO()
    call_command("bench_gateway", "--streams", "1,2", "--rounds", "1", "--duration", "0.5", "--tokens", "4",
                 "--token-ms", "1", "--servers", "daphne", "--embedded", "--json", str(report_path), stdout=out)
    printed = out.getvalue()
    found = RATIO_LINE.findall(printed)
    assert [streams for streams, _ in found] == ["1 stream", "2 streams"], printed
    assert all(float(value) > 0 for _, value in found)
    assert "error (" not in printed
    report = json.loads(report_path.read_text())
    assert {(level["target"], level["streams"]) for level in report["levels"]} == {
        (DIRECT, 1), (DIRECT, 2), (REFERENCE, 1), (REFERENCE, 2), ("gateway daphne x1", 1), ("gateway daphne x1", 2)}
    assert {(r["target"], r["baseline"]) for r in report["ratios"]} == {
        (REFERENCE, DIRECT), ("gateway daphne x1", DIRECT), ("gateway daphne x1", REFERENCE)}
    assert all(level["errors"] == 0 and level["completions_per_s"] > 0 for level in report["levels"])
    assert report["machine"]["cpus"] >= 1 and "daphne" in report["machine"]["versions"]
    gateway_steps = [level["step_ms"] for level in report["levels"] if level["target"] == "gateway daphne x1"]
    assert all("upstream_first_byte" in steps and min(steps.values()) >= 0 for steps in gateway_steps), gateway_steps
    assert "steps, gateway daphne x1 (mean ms from the step before): authenticated " in printed
