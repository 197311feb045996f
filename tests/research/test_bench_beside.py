"""`bench_gateway --beside-embedded`: the PostgreSQL + Redis gateway and the embedded one measured
in the same rounds, against the same direct and reference-hop rounds, and judged from that one
report (`judge_backends`)."""
from __future__ import annotations

import json
import os
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from research.gateway_bench.run import service_pids


@pytest.mark.integration
@pytest.mark.skipif(not settings.REDIS_URL or not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                    reason="measures the embedded gateway beside a PostgreSQL + Redis one")
def test_both_back_ends_run_in_the_same_rounds_and_one_report_is_judged(tmp_path: Path) -> None:
    report_path = tmp_path / "both.json"
    out = StringIO()
    call_command("bench_gateway", "--streams", "2", "--rounds", "1", "--duration", "0.5", "--tokens", "4",
                 "--token-ms", "1", "--servers", "uvicorn", "--processes", "1", "--beside-embedded",
                 "--json", str(report_path), stdout=out)
    printed = out.getvalue()
    assert "beside it, in the same rounds: embedded default" in printed, printed
    report = json.loads(report_path.read_text())
    levels = {level["target"]: level for level in report["levels"]}
    assert set(levels) == {"direct", "reference hop", "gateway uvicorn x1", "gateway uvicorn x1 embedded"}
    assert all(level["errors"] == 0 and level["completions_per_s"] > 0 for level in levels.values())
    # Each back end is what it says: only the PostgreSQL + Redis gateway makes round trips to Redis.
    assert levels["gateway uvicorn x1"]["live_round_trips_per_request"] >= 3
    assert levels["gateway uvicorn x1 embedded"]["live_round_trips_per_request"] is None
    assert "PostgreSQL" in report["setup"]["backend"] and report["setup"]["beside"].startswith("embedded default")
    # The back end's own processes (Redis's, PostgreSQL's) are measured in every round: here, beside.
    assert "Redis / PG CPU %" in printed
    assert all(isinstance(level[key], float) and level[key] >= 0 for level in levels.values()
               for key in ("redis_cpu_percent", "postgres_cpu_percent"))
    found = service_pids()
    assert found["redis-server"] and found["postgres"]
    assert {Path(f"/proc/{pid}/comm").read_text().strip() for pid in found["postgres"]} == {"postgres"}
    # Each gateway measured after its own direct and hop rounds: the hop ran once per gateway.
    assert len(levels["reference hop"]["rounds"]) == 2 and len(levels["gateway uvicorn x1"]["rounds"]) == 1

    judged = StringIO()
    call_command("judge_backends", str(report_path), "--no-save", stdout=judged)
    assert "against embedded, 1 pair of runs" in judged.getvalue()
    assert "errors, both runs: 0 (target 0): met" in judged.getvalue()


def test_beside_embedded_is_refused_without_a_back_end_to_be_beside(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CommandError, match="leave out --embedded"):
        call_command("bench_gateway", "--embedded", "--beside-embedded", stdout=StringIO())
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(CommandError, match="needs REDIS_URL and a PostgreSQL DATABASE_URL"):
        call_command("bench_gateway", "--beside-embedded", stdout=StringIO())
