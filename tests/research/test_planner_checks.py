"""The planner's checks as rows: the twenty passes imported by migration, `planner_check --name`
storing a new one with the noise beside it, and the pages at /research/checks/ (teachers only)."""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.test import Client

from research.models import PlannerCheck, PlannerCheckFigure
from research.planner.validation.noise import read_noise
from research.planner.validation.records import check_fields, counts, figure_rows, history, noise_text
from tests.research.test_planner_check import report


def load_history() -> None:
    """Migration 0015's loader, run again (idempotent): a transactional test before this one may have
    flushed the rows the migration wrote."""
    importlib.import_module("research.migrations.0015_planner_check_history").load(django_apps, None)


@pytest.fixture
def history_loaded(db: None) -> None:
    load_history()


def test_every_pass_of_the_history_is_in_the_compact_file_with_its_figures() -> None:
    entries = {entry["name"]: entry for entry in history()}
    assert {f"pass-{n:02d}" for n in range(1, 21)} <= set(entries)
    assert counts(entries["pass-20"]["comparison"]) == (12, 12)
    assert counts(entries["pass-19"]["comparison"]) == (9, 12)
    assert counts(entries["pass-16"]["comparison"]) == (7, 12)
    assert counts(entries["pass-19-quiet"]["comparison"]) == (4, 4)
    assert all(entry["finding"] and entry["reproduce"] and entry["measured_on"] for entry in entries.values())


def test_a_figure_with_an_unknown_verdict_is_refused() -> None:
    comparison = {"configurations": [{"label": "2x4", "figures": [{"name": "agent TTFT p50", "verdict": "fine"}]}]}
    with pytest.raises(ValueError, match="unknown verdict"):
        figure_rows(comparison)


def test_the_noise_in_words_spans_the_configurations() -> None:
    noise = {"1x4": {"jitter": 0.017, "load_factor": 1.029, "speed": [1.036, 1.031]},
             "2x4": {"jitter": 0.006, "load_factor": 1.002, "drift": [1.0, 1.04]}}
    assert noise_text(noise) == ("step jitter 0.6–1.7 %, load factor ×1.00–1.03, replays at ×1.03–1.04 of the "
                                 "calibration, drift probes ×1.00–1.04")
    assert noise_text({}) == "" and noise_text({"1x2": {"jitter": 0.02}}) == "step jitter 2.0 %"


def test_the_twenty_passes_are_rows_and_the_twentieth_held_twelve_of_twelve(history_loaded: None) -> None:
    names = set(PlannerCheck.objects.values_list("name", flat=True))
    assert {f"pass-{n:02d}" for n in range(1, 21)} | {"pass-19-quiet"} <= names
    twentieth = PlannerCheck.objects.get(name="pass-20")
    assert (twentieth.figures_within, twentieth.figures_total) == (12, 12) and twentieth.all_within
    assert twentieth.ranking["predicted"] == ["2x4", "1x2", "1x4"] and twentieth.ranking["same"]
    p95 = twentieth.figures.get(configuration="1x4", figure="agent TTFT p95")
    assert p95.predicted_ms == pytest.approx(16546.5, abs=0.1) and len(p95.measured_ms) == 3
    assert p95.ratio == pytest.approx(0.88, abs=0.005) and p95.holds
    assert "step jitter 0.6–1.7 %" in twentieth.noise_summary
    # queryable across the history: every agent p95 of 1x4 that missed
    missed = PlannerCheckFigure.objects.filter(configuration="1x4", figure="agent TTFT p95", verdict="outside")
    assert "pass-16" in {figure.planner_check.name for figure in missed}


def _write(path: Path, document: dict[str, Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return str(path)


@pytest.mark.django_db
def test_planner_check_with_a_name_stores_the_check_with_its_noise(tmp_path: Path) -> None:
    cases = []
    for label, p95 in (("a", 8.0), ("b", 16.0)):
        directory = tmp_path / label
        plan = _write(directory / "plan.json", {"rows": [{"students": 3, "report": report((2.0, p95), (1.0, 3.0))}]})
        runs = [_write(directory / f"replay-{n}.json", {**report((2.0, p95 + n), (1.0, 3.0)), "completed": 40 + n})
                for n in (1, 2)]
        (directory / "calibration-load.txt").write_text("  jitter             1.5% (relative SD)\n"
                                                        "  under a class      x1.042 every step\n")
        (directory / "drift.txt").write_text("probe-1: ... (ratio 1.00)\nprobe-2: ... (ratio 1.04)\n")
        (directory / "steps-1.txt").write_text("\nspeed in this run against the calibration: x1.061 (...)\n")
        cases += ["--case", f"{label}:{plan}:{','.join(runs)}"]
    call_command("planner_check", *cases, "--name", "pass-21", "--finding", "Held.", "--reproduce", "bash x.sh")
    check = PlannerCheck.objects.get(name="pass-21")
    assert (check.figures_within, check.figures_total, check.source) == (8, 8, "run")
    assert check.figures.count() == 8 and check.finding == "Held." and check.reproduce == "bash x.sh"
    assert check.noise["a"] == {"jitter": 0.015, "load_factor": 1.042, "drift": [1.0, 1.04], "speed": [1.061]}
    assert check.configurations[0]["students"] == 3 and check.configurations[0]["turns"]["measured"][1] == {
        "completed": 42, "refused": None}
    # again under the same name: replaced, not doubled
    call_command("planner_check", *cases[:2], "--name", "pass-21")
    check.refresh_from_db()
    assert check.figures.count() == 4 and check.figures_total == 4


@pytest.mark.django_db
def test_loading_the_history_twice_keeps_one_row_a_check() -> None:
    load_history()
    load_history()
    assert PlannerCheck.objects.filter(name="pass-20").count() == 1
    assert PlannerCheck.objects.get(name="pass-20").figures.count() == 12


def test_a_directory_without_validation_files_has_no_noise(tmp_path: Path) -> None:
    assert read_noise(tmp_path) == {}


def test_check_fields_keep_each_configurations_notes_beside_its_class() -> None:
    entry = next(e for e in history() if e["name"] == "pass-20")
    fields = check_fields(entry)
    assert fields["figures_within"] == 12 and fields["configurations"][0]["label"] == "1x4"
    assert any("refused" in note for note in fields["configurations"][0]["notes"])


def test_teachers_see_the_checks_and_students_are_refused(client: Client, teacher, student,  # noqa: ANN001
                                                         history_loaded: None) -> None:
    for url in ("/research/checks/", "/research/checks/pass-20/"):
        assert client.get(url).status_code == 302
    client.force_login(student)
    for url in ("/research/checks/", "/research/checks/pass-20/"):
        assert client.get(url).status_code == 403
    client.force_login(teacher)
    listing = client.get("/research/checks/").content.decode()
    assert 'href="/research/checks/pass-20/"' in listing and "12 of 12" in listing
    assert listing.index("pass-20") < listing.index("pass-01")
    detail = client.get("/research/checks/pass-20/").content.decode()
    assert "12 of 12 figures within ±25 %" in detail and "<td>16.55</td>" in detail and "<td>23.03</td>" in detail
    assert "2x4 &lt; 1x2 &lt; 1x4" in detail and "bash scripts/validate_planner.sh" in detail
    assert '<th scope="row">agent TTFT p95</th>' in detail
    missed = client.get("/research/checks/pass-16/").content.decode()
    assert "<strong>outside</strong>" in missed
    assert client.get("/research/checks/pass-99/").status_code == 404
    assert 'href="/research/checks/"' in client.get("/research/").content.decode()
    assert "How far has the planner been checked?" in client.get("/research/plan/").content.decode()
