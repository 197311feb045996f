"""step_timing on a hand-written trace log: the loop's iterations rebuilt from llama-server's lines
and costed with a cost model; the command reads a stored calibration."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from research.models import Calibration
from research.planner.cost import CostModel, Piece
from research.planner.validation.step_timing import parse, time_steps

# one prompt of 100 tokens (0.5 s of forward passes), then one decode step (20 ms), then idle
LOG = """\
0.00.000.000 I llama_context: n_batch       = 2048
0.01.000.000 D que    post: posting NEXT_RESPONSE
0.01.000.100 D slot launch_slot_: id  0 | task 1 | new prompt, n_ctx_slot = 4096, task.n_tokens = 100
0.01.000.200 D slot update_slots: id  0 | task 1 | cached n_tokens = 0, memory_seq_rm [0, end)
0.01.000.300 D decode: n_batch (effective) = 2048
0.01.500.300 D slot process_toke: id  0 | task 1 | n_gen = 1, next token: 42
0.01.600.000 D que    post: posting NEXT_RESPONSE
0.01.600.100 D slot update_slots: id  0 | task 1 | slot decode token, n_ctx = 4096, n_tokens = 101
0.01.600.200 D decode: n_batch (effective) = 2048
0.01.620.200 D slot process_toke: id  0 | task 1 | n_gen = 2, next token: 43
0.01.700.000 I srv  update_slots: all slots are idle
"""
MODEL = CostModel(prefill_s_per_token=0.005, decode_s_per_token=0.02, decode_s_per_extra_slot=0.005)


def test_the_iterations_are_rebuilt_from_the_log() -> None:
    steps = parse(LOG.splitlines())
    assert [step.kind() for step in steps] == ["chunks only", "decode 1"]
    assert steps[0].chunks == [(0, 100, 0)] and steps[1].decoding == [(0, 101)]
    assert steps[0].first_out is not None and steps[0].decode_at is not None
    assert steps[0].first_out - steps[0].decode_at == pytest.approx(0.5)


def test_the_speed_is_the_measured_passes_over_the_modelled() -> None:
    timing = time_steps([("worker-1.log", LOG)], MODEL, slots=4)
    modelled = sum(MODEL.step_s(batch, streams=4) for batch in _pieces(LOG))
    assert timing.speed == pytest.approx((0.5 + 0.02) / modelled)
    assert timing.lines[-1].startswith(f"speed in this run against the calibration: x{timing.speed:.3f}")
    with pytest.raises(ValueError, match="no iterations"):
        time_steps([("empty.log", "nothing here\n")], MODEL, slots=4)


def _pieces(log: str) -> list[list[Piece]]:
    out = []
    for step in parse(log.splitlines()):
        out.append([Piece(s, 1, c, decode=True) for s, c in step.decoding]
                   + [Piece(s, t, c) for s, t, c in step.chunks])
    return out


@pytest.mark.django_db
def test_the_command_costs_a_log_with_a_stored_calibration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calibration = Calibration.objects.create(source="assumptions", cost=MODEL.as_dict())
    log = tmp_path / "demo-worker-1.log"
    log.write_text(LOG)
    call_command("step_timing", str(calibration.pk), str(log), "--slots", "4")
    printed = capsys.readouterr().out
    assert f"calibration {calibration.pk}:" in printed and "chunks only" in printed
    assert printed.strip().splitlines()[-1].startswith("speed in this run against the calibration: x")
    with pytest.raises(CommandError):
        call_command("step_timing", "999999", str(log))
