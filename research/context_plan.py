"""How much context fits: KV-cache memory per slot against the GPUs' memory. Pure, no Django.

For a model (its GGUF facts: layers, KV heads, K and V head dims) on `gpus` cards of `vram_gib`
each, with `slots` slots (llama-server `-np`; the context `-c` is shared, per-slot = `-c` ÷ `-np`)
and a KV cache type (`--cache-type-k/v`):

    KV bytes per token = layers x KV heads x (K dim + V dim) x bytes per element
                         (f16 2, q8_0 34/32, q4_0 18/32)
    free for KV        = gpus x (vram - reserve) - weights
    largest context per slot = free ÷ (slots x KV bytes per token)

`weights` is every tensor of the file (all layers offloaded, `-ngl 99`); `reserve` is what each
card loses before any KV: the CUDA context and llama.cpp's compute buffers (an estimate, 512 MiB
by default; check `nvidia-smi` on the rig, the compute buffer grows with the batch size). The
total is an upper bound: with a layer split each card holds whole layers with their KV, so the
last layer that does not fit on a card is a loss a finer plan would count.

Memory is in GiB and MiB (2**30, 2**20 bytes: a GTX 1070's "8 GB" are 8 GiB, 8192 MiB as NVML
reports them); weights and KV per token in bytes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from fleet.gguf import GgufFacts
from fleet.local_worker import MAX_YARN_SCALE

GIB = 2**30
MIB = 2**20
LONG_CONTEXT = 262_144  # "256k"
DEFAULT_RESERVE_MIB = 512


@dataclass(frozen=True)
class ContextPlan:
    gpus: int
    vram_gib: float
    slots: int
    cache_type: str
    reserve_mib: float
    weight_bytes: int
    kv_bytes_per_token: float
    kv_mib_per_slot_per_1k_tokens: float
    free_for_kv_bytes: float
    largest_context_per_slot: int
    trained_context: int
    yarn_scale_needed: int  # 1: within the trained context; else the whole factor that reaches it
    long_context: int
    long_context_kv_gib_per_slot: float
    long_context_total_gib: float
    long_context_gpus_needed: int | None  # of this size; None when not even one card holds a share

    @property
    def fits(self) -> bool:
        return self.largest_context_per_slot > 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def context_plan(facts: GgufFacts, *, gpus: int, vram_gib: float, slots: int, cache_type: str = "f16",
                 reserve_mib: float = DEFAULT_RESERVE_MIB, long_context: int = LONG_CONTEXT) -> ContextPlan:
    """The plan for one configuration (module docstring). ValueError on impossible inputs."""
    if gpus < 1 or slots < 1 or vram_gib <= 0 or reserve_mib < 0:
        raise ValueError("need at least one GPU and one slot, a positive VRAM and a reserve of 0 or more")
    if facts.layers < 1 or facts.kv_heads < 1 or facts.head_dim < 1:
        raise ValueError("the GGUF facts give no attention shape (layers, KV heads, head dim)")
    per_token = facts.kv_bytes_per_token(cache_type)
    usable_per_gpu = vram_gib * GIB - reserve_mib * MIB
    free = gpus * usable_per_gpu - facts.tensor_bytes
    largest = max(0, math.floor(free / (slots * per_token))) if free > 0 else 0
    trained = facts.context_length
    yarn = 1 if not trained or largest <= trained else math.ceil(largest / trained)
    long_per_slot = long_context * per_token
    long_total = facts.tensor_bytes + slots * long_per_slot
    needed = math.ceil(long_total / usable_per_gpu) if usable_per_gpu > 0 else None
    return ContextPlan(
        gpus=gpus, vram_gib=vram_gib, slots=slots, cache_type=cache_type, reserve_mib=reserve_mib,
        weight_bytes=facts.tensor_bytes, kv_bytes_per_token=per_token,
        kv_mib_per_slot_per_1k_tokens=1000 * per_token / MIB, free_for_kv_bytes=max(free, 0.0),
        largest_context_per_slot=largest, trained_context=trained, yarn_scale_needed=yarn,
        long_context=long_context, long_context_kv_gib_per_slot=long_per_slot / GIB,
        long_context_total_gib=(long_total + (needed or gpus) * reserve_mib * MIB) / GIB,
        long_context_gpus_needed=needed,
    )


def describe(plan: ContextPlan) -> str:
    """One line per configuration for the terminal."""
    head = (f"{plan.gpus} GPU(s) x {plan.vram_gib:g} GiB, {plan.slots} slot(s), KV {plan.cache_type}: "
            f"{plan.kv_mib_per_slot_per_1k_tokens:.1f} MiB per slot per 1,000 tokens")
    if not plan.fits:
        fit = f"the weights ({plan.weight_bytes / GIB:.2f} GiB) leave no room for KV"
    else:
        fit = f"largest context per slot {plan.largest_context_per_slot:,} tokens"
        if plan.yarn_scale_needed > 1:
            fit += f" (past the trained {plan.trained_context:,}: YaRN x{plan.yarn_scale_needed}"
            fit += (f", more than the x{MAX_YARN_SCALE} the launcher allows)" if plan.yarn_scale_needed > MAX_YARN_SCALE
                    else ")")
    long = (f"{plan.long_context // 1024}k per slot: {plan.long_context_kv_gib_per_slot:.1f} GiB of KV per slot, "
            f"{plan.long_context_total_gib:.1f} GiB with the weights and reserves for {plan.slots} slot(s)")
    if plan.long_context_gpus_needed is not None:
        long += f" = {plan.long_context_gpus_needed} GPU(s) of {plan.vram_gib:g} GiB"
    return f"{head}; {fit}; {long}"
