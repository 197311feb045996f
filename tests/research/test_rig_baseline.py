"""rig_baseline's own rules (the sequence end to end runs against the rehearsal rig in
tests/integration/test_demo.py, and Ctrl-C in tests/integration/test_rig_agent.py)."""
from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from fleet.models import Worker
from fleet.services import worker_register, worker_set_state
from research.rig_baseline import BaselineRefused, context_prompts, context_sizes, refuse_last_healthy


def test_the_context_sweep_doubles_from_8k_while_a_prompt_and_its_answer_fit_a_slot() -> None:
    assert context_sizes(32_768, output_tokens=128) == [8192, 16384]
    assert context_sizes(65_536, output_tokens=128) == [8192, 16384, 32768]
    assert context_sizes(2048, output_tokens=128) == [464, 928, 1856]  # a small slot: 1/4, 1/2, all of it
    assert context_sizes(200, output_tokens=128) == []


def test_past_the_trained_context_the_sweep_measures_only_a_yarn_worker() -> None:
    sizes = [8192, 16384, 32768]
    assert context_prompts(sizes, per_slot=65_536, output_tokens=128, trained=8192, yarn=False) == (
        [], [8192, 16384, 32768])  # 8192 + its answer is already past 8,192
    assert context_prompts(sizes, per_slot=65_536, output_tokens=128, trained=8192, yarn=True) == (sizes, [])
    assert context_prompts(sizes, per_slot=16_000, output_tokens=128, trained=32768, yarn=False) == ([8192], [])


@pytest.mark.django_db
def test_the_pools_last_healthy_worker_is_refused_unless_forced() -> None:
    only = worker_register(name="only", base_url="http://127.0.0.1:9", model_id="m", pool_name="production")
    worker_set_state(worker=only, state=Worker.State.HEALTHY, reason="test")
    with pytest.raises(BaselineRefused, match="last healthy worker of pool production"):
        refuse_last_healthy(only, force=False)
    refuse_last_healthy(only, force=True)
    other = worker_register(name="other", base_url="http://127.0.0.1:10", model_id="m", pool_name="production")
    worker_set_state(worker=other, state=Worker.State.HEALTHY, reason="test")
    refuse_last_healthy(only, force=False)  # another one serves meanwhile


@pytest.mark.django_db
@pytest.mark.parametrize("args, message", [
    (["--worker", "nobody"], "no such worker"),
    (["--worker", "by-hand", "--steps", "warm,nap"], "unknown nap"),
    (["--worker", "by-hand", "--idle", "-5"], "too small"),
    (["--worker", "by-hand", "--concurrency", "1,x"], "expected numbers"),
    (["--worker", "by-hand", "--steps", "warm", "--force"], "not on a rig"),
])
def test_rig_baseline_refuses_what_it_cannot_do_with_the_reason(args, message) -> None:  # noqa: ANN001
    worker_register(name="by-hand", base_url="http://127.0.0.1:9", model_id="m", pool_name="production")
    with pytest.raises(CommandError, match=message):
        call_command("rig_baseline", *args)
