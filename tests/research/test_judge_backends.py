"""The PostgreSQL + Redis gateway judged against the embedded one from pairs of bench_gateway
reports (research/gateway_bench/backends.py, manage.py judge_backends)."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from research.gateway_bench.backends import BESIDE, ONE, beside_pair, has_beside, judge
from research.management.commands.judge_backends import STORED, stored_pairs
from research.models import BenchmarkRun

pytestmark = pytest.mark.backend_neutral


def _level(streams: int, target: str, *, p50: float, p99: float, rate: float, cpu: float | None = None,
           errors: int = 0) -> dict[str, Any]:
    return {"upstream": "replay", "streams": streams, "target": target, "ttft_p50_ms": p50, "ttft_p99_ms": p99,
            "completions_per_s": rate, "chunks_per_s": rate * 64, "errors": errors, "server_cpu_percent": cpu}


def _report(backend: str, *, hop32: float = 100.0, gw32: float = 95.0, p50: float = 8.0, p99: float = 15.0,
            cpu32: float = 20.0, gw128: float = 350.0, x2_128: float | None = None, errors: int = 0) -> dict[str, Any]:
    levels = [
        _level(32, "reference hop", p50=7.0, p99=9.0, rate=hop32, cpu=10.0),
        _level(32, "gateway uvicorn x1", p50=7.0 + p50, p99=9.0 + p99, rate=gw32, cpu=cpu32, errors=errors),
        _level(128, "reference hop", p50=11.0, p99=20.0, rate=390.0, cpu=35.0),
        _level(128, "gateway uvicorn x1", p50=40.0, p99=120.0, rate=gw128, cpu=75.0),
    ]
    if x2_128 is not None:
        levels.append(_level(128, "gateway uvicorn x2", p50=30.0, p99=90.0, rate=x2_128, cpu=80.0))
    return {"setup": {"backend": backend, "tokens": 64}, "levels": levels}


REDIS = "PostgreSQL, database ocs_bench_1 made for this run; Redis, namespace bench-1"
EMBEDDED = "embedded default (SQLite in a temporary OCS_VAR_DIR, live state in process)"


def test_each_target_is_taken_against_the_reference_hop_of_its_own_run() -> None:
    # The embedded run's machine was 10 % faster (its hop too): the gateways' own costs are equal.
    redis = _report(REDIS, hop32=90.0, gw32=85.5, p50=9.0, p99=30.0, cpu32=25.0, gw128=340.0, x2_128=360.0)
    embedded = _report(EMBEDDED, hop32=100.0, gw32=95.0, p50=8.0, p99=15.0, cpu32=20.0, gw128=350.0)
    judged = {item.target.name: item for item in judge([(redis, embedded)])}
    assert judged["32 streams: TTFT added p50, PostgreSQL + Redis − embedded"].figures == (pytest.approx(1.0),)
    assert judged["32 streams: TTFT added p99, PostgreSQL + Redis − embedded"].figures == (pytest.approx(15.0),)
    assert judged["32 streams: completions/s, PostgreSQL + Redis ÷ embedded"].figures == (pytest.approx(1.0),)
    assert judged["128 streams: completions/s, PostgreSQL + Redis ÷ embedded"].figures == (pytest.approx(340 / 350),)
    # CPU per chunk, each gateway's ÷ its hop's: (25 / 85.5) / (10 / 90) against (20 / 95) / (10 / 100)
    cpu = judged["32 streams: CPU per chunk, PostgreSQL + Redis ÷ embedded"].figures[0]
    assert cpu == pytest.approx((25.0 / 85.5) / (10.0 / 90.0) / ((20.0 / 95.0) / (10.0 / 100.0)))
    assert cpu == pytest.approx(1.25)
    assert judged["128 streams: completions/s, 2 processes ÷ 1 (PostgreSQL + Redis)"].figures == (
        pytest.approx(360 / 340),)
    assert [item.verdict for item in judged.values()] == ["met", "met", "met", "met", "not met", "met", "met"]


def test_a_target_met_in_one_pair_and_not_the_other_says_so_and_a_missing_level_is_not_met() -> None:
    embedded = _report(EMBEDDED)
    slow_start = _report(REDIS, p50=14.0, x2_128=360.0)  # 6 ms behind at p50
    no_x2 = _report(REDIS, x2_128=None, errors=2)
    judged = {item.target.name: item for item in judge([(slow_start, embedded), (no_x2, embedded)])}
    assert judged["32 streams: TTFT added p50, PostgreSQL + Redis − embedded"].verdict == "met in 1 of 2"
    two = judged["128 streams: completions/s, 2 processes ÷ 1 (PostgreSQL + Redis)"]
    assert two.met == (True, False) and two.as_dict()["figures"][1] is None
    assert judged["errors, both runs"].figures == (0.0, 2.0)
    assert "met in 1 of 2" in judged["errors, both runs"].line()


def test_pairs_in_the_wrong_order_are_refused() -> None:
    with pytest.raises(ValueError, match="PostgreSQL \\+ Redis report, then an embedded one"):
        judge([(_report(EMBEDDED), _report(REDIS))])


def test_a_report_with_the_embedded_gateway_beside_is_a_pair_by_itself(tmp_path: Path) -> None:
    # Both back ends in the same rounds: one direct / hop measurement, two gateways beside it.
    redis = _report(REDIS, gw32=90.0, p50=9.0, cpu32=24.0, x2_128=360.0)
    embedded_levels = [level for level in _report(EMBEDDED, gw32=95.0, p50=8.0, cpu32=20.0)["levels"]
                       if level["target"] == ONE]
    both = {**redis, "setup": {**redis["setup"], "beside": EMBEDDED},
            "levels": redis["levels"] + [{**level, "target": BESIDE} for level in embedded_levels]}
    assert has_beside(both) and not has_beside(redis)
    as_pair = beside_pair(both)
    alone = [item.as_dict() for item in judge([(redis, _report(EMBEDDED, gw32=95.0, p50=8.0, cpu32=20.0))])]
    assert [item.as_dict() for item in judge([as_pair])] == alone
    assert {level["target"] for level in as_pair[0]["levels"]} == {"reference hop", ONE, "gateway uvicorn x2"}
    assert {level["target"] for level in as_pair[1]["levels"]} == {"reference hop", ONE}
    with pytest.raises(ValueError, match="beside"):
        beside_pair(redis)

    # The command takes it alone, or beside pairs of separate runs.
    (tmp_path / "both.json").write_text(json.dumps(both))
    (tmp_path / "pg.json").write_text(json.dumps(redis))
    (tmp_path / "emb.json").write_text(json.dumps(_report(EMBEDDED, gw32=95.0, p50=8.0, cpu32=20.0)))
    out = io.StringIO()
    call_command("judge_backends", str(tmp_path / "both.json"), str(tmp_path / "pg.json"), str(tmp_path / "emb.json"),
                 "--no-save", stdout=out)
    assert "2 pairs of runs" in out.getvalue()
    assert "32 streams: completions/s, PostgreSQL + Redis ÷ embedded: 0.947×, 0.947× (target ≥ 0.97): not met" \
        in out.getvalue()
    with pytest.raises(CommandError, match="in pairs"):
        call_command("judge_backends", str(tmp_path / "both.json"), str(tmp_path / "pg.json"), "--no-save",
                     stdout=io.StringIO())


@pytest.mark.django_db
def test_the_command_prints_the_verdicts_and_stores_the_pairs_as_a_probe_run(tmp_path: Path, client: Any,
                                                                           admin_user: Any) -> None:
    files = []
    for name, report in (("pg.json", _report(REDIS, gw32=90.25, x2_128=360.0)), ("emb.json", _report(EMBEDDED))):
        (tmp_path / name).write_text(json.dumps(report))
        files.append(str(tmp_path / name))
    out = []

    class Out:
        def write(self, text: str) -> None:
            out.append(text)

        def flush(self) -> None:
            pass

    call_command("judge_backends", *files, stdout=Out())
    text = "".join(out)
    assert "32 streams: completions/s, PostgreSQL + Redis ÷ embedded: 0.950× (target ≥ 0.97): not met" in text
    run = BenchmarkRun.objects.get(scenario="probe-backends")
    assert run.kind == BenchmarkRun.Kind.PROBE and len(run.summary["pairs"]) == 1
    assert f"stored as run {run.pk}" in text
    client.force_login(admin_user)
    page = client.get(f"/research/runs/{run.pk}/").content.decode()
    assert "32 streams: completions/s, PostgreSQL + Redis ÷ embedded" in page and "not met" in page
    assert '<span class="figure">0.950×</span>' in page  # a figure and its unit stay together on a phone

    with pytest.raises(CommandError, match="in pairs"):
        call_command("judge_backends", files[0], stdout=Out())
    with pytest.raises(CommandError, match="cannot be judged"):
        call_command("judge_backends", files[1], files[0], "--no-save", stdout=Out())
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CommandError, match="not a bench_gateway --json report"):
        call_command("judge_backends", str(tmp_path / "bad.json"), files[1], stdout=Out())
    assert BenchmarkRun.objects.filter(scenario="probe-backends").count() == 1


@pytest.mark.django_db
def test_the_stored_pairs_are_judged_again_from_their_own_reports() -> None:
    """The judged runs of docs/performance.md ("Judged in pairs") are kept in the repository
    (research/data/backends_judged.json) with their verdicts, which are what judge() makes of the
    reports kept with them; `judge_backends --stored` prints and stores them again."""
    entries = json.loads(STORED.read_text())
    assert {e["group"] for e in entries} == {"backends-2026-12-07-746ed6b", "backends-2026-12-07-streamed",
                                             "backends-2026-12-08-same-rounds"}
    for entry, kept in zip(entries, stored_pairs()):
        runs = 4 if entry["group"].endswith("same-rounds") else 3
        assert kept.label == entry["label"] and len(kept.pairs) == runs
        assert [item.as_dict() for item in judge(kept.pairs)] == entry["summary"]["judged"]
    same_rounds = next(e for e in entries if e["group"].endswith("same-rounds"))["summary"]
    verdicts = {item["target"]: item["verdict"] for item in same_rounds["judged"]}
    assert verdicts["32 streams: CPU per chunk, PostgreSQL + Redis ÷ embedded"] == "met"
    assert verdicts["128 streams: completions/s, PostgreSQL + Redis ÷ embedded"] == "not met"
    streamed = next(e for e in entries if e["group"].endswith("streamed"))["summary"]["pairs"]
    assert all(level["live_round_trips_per_request"] < 4.5 for pair in streamed for level in pair["redis"]["levels"]
               if level["streams"] == 32 and level["target"].startswith("gateway"))  # the charges' trip went
    out = io.StringIO()
    call_command("judge_backends", "--stored", stdout=out)
    runs = BenchmarkRun.objects.filter(scenario="probe-backends")
    assert sorted(run.label for run in runs) == sorted(e["label"] for e in entries)
    assert all(run.summary["judged"] == e["summary"]["judged"] for run in runs for e in entries
               if e["label"] == run.label)
    # Stored with the time the runs were made, not the time they were stored again.
    assert all(run.started_at.isoformat() == e["started_at"] and run.ended_at.isoformat() == e["ended_at"]
               for run in runs for e in entries if e["label"] == run.label)
    assert "32 streams: CPU per chunk, PostgreSQL + Redis ÷ embedded: 1.153×, 1.264×, 1.155×" in out.getvalue()
    with pytest.raises(CommandError, match="pairs of reports, or --stored"):
        call_command("judge_backends", stdout=io.StringIO())
