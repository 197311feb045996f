"""The context plan on the real SmolLM2 GGUF and against sums done by hand."""
from __future__ import annotations

import json
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from fleet.gguf import read_gguf
from fleet.local_worker import find_default_model
from research.context_plan import GIB, MIB, context_plan

SMOL = read_gguf(find_default_model())


def test_smollm2_on_one_8_gib_card_with_four_slots() -> None:
    plan = context_plan(SMOL, gpus=1, vram_gib=8, slots=4, cache_type="f16", reserve_mib=512)
    # 30 layers x 3 KV heads x (64 + 64) dims x 2 bytes = 23,040 bytes per token.
    assert plan.kv_bytes_per_token == 23_040
    assert plan.kv_mib_per_slot_per_1k_tokens == pytest.approx(23_040_000 / MIB)
    free = 8 * GIB - 512 * MIB - SMOL.tensor_bytes
    assert plan.largest_context_per_slot == free // (4 * 23_040)
    assert plan.yarn_scale_needed == -(-plan.largest_context_per_slot // 8192)  # far past the trained 8k
    # 256k per slot: 262,144 x 23,040 bytes = 5.625 GiB each, 22.5 GiB for four, plus the weights.
    assert plan.long_context_kv_gib_per_slot == pytest.approx(5.625)
    assert plan.long_context_gpus_needed == -(-(SMOL.tensor_bytes + 4 * 262_144 * 23_040) // (8 * GIB - 512 * MIB))


def test_a_quantized_cache_holds_more_and_a_27b_on_one_card_holds_nothing() -> None:
    f16 = context_plan(SMOL, gpus=1, vram_gib=8, slots=1, cache_type="f16")
    q8 = context_plan(SMOL, gpus=1, vram_gib=8, slots=1, cache_type="q8_0")
    q4 = context_plan(SMOL, gpus=1, vram_gib=8, slots=1, cache_type="q4_0")
    assert f16.largest_context_per_slot < q8.largest_context_per_slot < q4.largest_context_per_slot
    assert q8.kv_bytes_per_token == pytest.approx(23_040 / 2 * 34 / 32)
    # A 27B-sized file (16.5 GB) on one 8 GiB card: no room for any KV; seven cards: room.
    big = replace(SMOL, tensor_bytes=16_500_000_000, layers=62, kv_heads=16, head_dim=128, context_length=131_072)
    assert not context_plan(big, gpus=1, vram_gib=8, slots=1).fits
    seven = context_plan(big, gpus=7, vram_gib=8, slots=4, cache_type="q8_0")
    assert seven.fits and seven.yarn_scale_needed == 1 and seven.long_context_gpus_needed > 7


@pytest.mark.backend_neutral  # reads a GGUF file: no database, no live state
def test_command_prints_every_configuration_for_a_gguf(tmp_path: Path) -> None:
    out = StringIO()
    plans_path = tmp_path / "plan.json"
    call_command("context_plan", "--gguf", str(find_default_model()), "--gpus", "1", "--vram-gb", "8",
                 "--slots", "1,4", "--json", str(plans_path), stdout=out)
    lines = out.getvalue().splitlines()
    assert "30 layers, 3 KV heads x 64 dims" in lines[0] and "trained context 8,192" in lines[0]
    plans = json.loads(plans_path.read_text())
    assert [(p["slots"], p["cache_type"]) for p in plans] == [
        (1, "f16"), (1, "q8_0"), (1, "q4_0"), (4, "f16"), (4, "q8_0"), (4, "q4_0")]
    assert sum("MiB per slot per 1,000 tokens" in line and "256k per slot" in line for line in lines) == 6
    with pytest.raises(CommandError, match="cache-type"):
        call_command("context_plan", "--gguf", str(find_default_model()), "--vram-gb", "8", "--cache-type", "q3")


@pytest.mark.django_db
def test_command_plans_a_registered_worker_from_its_agents_report() -> None:
    from fleet.models import Gpu
    from fleet.rigs import rig_create
    from fleet.services import worker_register

    rig, _ = rig_create(name="rig1", address="100.64.0.12")
    for index in range(7):
        Gpu.objects.create(rig=rig, index=index, name="NVIDIA GeForce GTX 1070", memory_total_mib=8192)
    worker = worker_register(name="rig1-a", base_url="http://100.64.0.12:8080", model_id="m", pool_name="production",
                             slots=4)
    worker.rig, worker.gpu_indices = rig, list(range(7))
    worker.launch = {"gguf": {**SMOL.as_dict(), "path": "/models/absent.gguf"}}
    worker.save(update_fields=["rig", "gpu_indices", "launch"])
    out = StringIO()
    call_command("context_plan", "--worker", "rig1-a", "--cache-type", "q8_0", stdout=out)
    expected = context_plan(SMOL, gpus=7, vram_gib=8, slots=4, cache_type="q8_0")
    assert f"7 GPU(s) x 8 GiB, 4 slot(s), KV q8_0" in out.getvalue()
    assert f"largest context per slot {expected.largest_context_per_slot:,} tokens" in out.getvalue()
