"""bench_live_client: the live-state round trip with hiredis and with the Python parser, or with
redis.asyncio and the gateway's lean client, side by side, on the real Redis (the PostgreSQL +
Redis pass)."""
from __future__ import annotations

from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from research.management.commands.bench_live_client import compare
from research.models import BenchmarkRun

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs the Redis back end")


@pytest.mark.django_db
def test_both_parsers_run_side_by_side_and_the_run_is_stored() -> None:
    out = StringIO()
    call_command("bench_live_client", "--ops", "40", "--concurrency", "1,4", "--rounds", "2", stdout=out)
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["1", "4"] and "hiredis" in lines[0]
    run = BenchmarkRun.objects.get(scenario="probe-live-client")
    assert len(run.summary["rounds"]) == 2 and set(run.summary["rounds"][0]) == {"python", "hiredis"}
    row = run.summary["table"]["4"]
    assert row["cpu_ratio"] == pytest.approx(row["hiredis"]["cpu_us_per_op"] / row["python"]["cpu_us_per_op"])
    with pytest.raises(CommandError, match="concurrency"):
        call_command("bench_live_client", "--concurrency", "x", "--no-save")


@pytest.mark.django_db
@pytest.mark.parametrize(("mode", "baseline", "candidate"), [("client", "redis-py", "lean"), ("floor", "ping", "lean")])
def test_two_clients_or_the_floor_run_side_by_side(mode: str, baseline: str, candidate: str) -> None:
    out = StringIO()
    call_command("bench_live_client", "--compare", mode, "--ops", "200", "--concurrency", "8", "--rounds", "1",
                 stdout=out)
    assert f"({baseline}) →" in out.getvalue() and f"({candidate})" in out.getvalue()
    run = BenchmarkRun.objects.get(scenario="probe-live-client")
    assert run.summary["compare"] == mode and set(run.summary["rounds"][0]) == {baseline, candidate}
    assert run.label == f"live-state round trip: {candidate} against {baseline}"
    if mode == "floor":  # a bare PING carries none of the load's read (five commands, one a Lua script)
        assert run.summary["table"]["8"]["cpu_ratio"] > 1


def test_the_ratio_is_of_the_medians_over_rounds() -> None:
    def level(cpu: float, ops: float) -> dict:
        return {"1": {"cpu_us_per_op": cpu, "ops_per_s": ops}}
    rounds = [{"python": level(100, 1000), "hiredis": level(50, 1500)},
              {"python": level(120, 900), "hiredis": level(60, 1800)},
              {"python": level(110, 950), "hiredis": level(40, 1600)}]
    row = compare(rounds)["1"]
    assert row["cpu_ratio"] == pytest.approx(50 / 110) and row["throughput_ratio"] == pytest.approx(1600 / 950)

