"""A cost model from stated assumptions, for a worker nobody has measured yet (the rigs). Pure.

Every number is an `Assumption` with its source and the measurement that replaces it; the
calibration stores them, `plan_class` prints them, docs/research/rig-forecast.md lists them.

- decode: bandwidth-bound (docs/hardware.md): one step reads every weight once, so with a
  layer split (one GPU at a time) time per token = weight bytes / (one card's bandwidth x the
  fraction of the roofline llama.cpp reaches); each further slot in the batch reads its own KV
  cache (`decode_s_per_context_token` = KV bytes per token / effective bandwidth) and adds a small
  compute share (`extra_slot_fraction` of a step).
- prompt evaluation: compute-bound; the published 2 x P40 pp512 scaled to the card by FP32
  throughput and to the model by parameter count. No gain assumed from the layer split.
- slot files (a handover's save and restore, tasks of the worker's loop): a slot's KV cache copied
  between the cards and the host over the cards' PCIe links (Gen1 x1 risers on the rigs), one layer
  after another so one link at a time, plus, for a save, the file written to the host's disk.
- memory: the weights a card holds (a mixture of experts holds every expert: its total weights, not
  the active ones a token reads) + every slot's KV + a compute buffer per GPU must fit the worker's cards.
- a layer split's hops: with `hop_bytes_per_token` set (a token's activations, hidden size x 4 bytes),
  each prompt token crosses `gpus - 1` card boundaries over the cards' PCIe links at `link_gbs`, added
  to its prompt time (0, the default: not modelled, as the rig forecast planned).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fleet.gguf import KV_BYTES_PER_ELEMENT
from research.planner.cost import DEFAULT_BATCH_TOKENS, CostModel
from research.roofline import GB, gpu_spec, roofline


@dataclass(frozen=True)
class Assumption:
    name: str
    value: float
    unit: str
    source: str
    replaced_by: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


P40_PP512_TOK_S = 198.0  # 2 x P40, Qwen3-32B Q4_K_M, layer split
P40_MODEL_BILLIONS = 32.0


@dataclass(frozen=True)
class RigAssumptions:
    """What the forecast takes for one worker (defaults: the team's 27B Q4_K_M on GTX 1070s)."""

    gpu: str = "GTX 1070"
    gpus: int = 8
    weight_gb: float = 16.2  # weights read per token (a mixture of experts: its active ones)
    model_billions: float = 27.0  # parameters a token touches (scales the prompt rate)
    total_weight_gb: float | None = None  # weights the cards hold; None: weight_gb (a dense model)
    kv_bytes_per_token_f16: float = 2 * 64 * 8 * 128 * 2.0
    roofline_fraction: float = 0.79
    extra_slot_fraction: float = 0.03
    request_overhead_s: float = 0.3
    compute_buffer_gb_per_gpu: float = 0.5
    cache_type: str = "f16"
    slot_copy_gbs: float = 0.2  # card <-> host over a Gen1 x1 riser; 0 plans slot files as free
    slot_write_gbs: float = 1.0  # the saved file written to the host's disk
    prefill_efficiency: float = 1.0  # of the dense pp512 scaling (a mixture of experts reaches less)
    hop_bytes_per_token: float = 0.0  # activations a prompt token sends across a card boundary; 0: free
    link_gbs: float = 0.2  # a card's PCIe link for those hops (Gen1 x1 riser)
    weights_source: str = "docs/hardware.md: a ~27B Q4_K_M file of ~16.5 GB, ~16.2 GB read per token"
    kv_source: str = ("assumption: a Qwen3-32B-like geometry (64 layers x 8 KV heads x 128 x K+V x 2 bytes), "
                      "docs/hardware.md formula")
    roofline_source: str = "docs/research/rig-baseline.md: 12.5 tok/s measured vs a 15.8 tok/s ceiling"

    @property
    def held_weight_gb(self) -> float:
        """GB of weights the worker's cards hold (every expert of a mixture of experts)."""
        return self.weight_gb if self.total_weight_gb is None else self.total_weight_gb


def assumed_cost(rig: RigAssumptions) -> tuple[CostModel, list[Assumption], dict[str, Any]]:
    """(the cost model, its assumptions, the memory facts for `memory_check`)."""
    spec = gpu_spec(rig.gpu)
    ceiling = roofline(weight_bytes=rig.weight_gb * GB, bandwidth_gbs=spec.bandwidth_gbs, gpus=rig.gpus,
                       split_mode="layer")
    decode_s = 1.0 / (ceiling.ceiling_tok_s * rig.roofline_fraction)
    effective_bytes_s = ceiling.bandwidth_gbs * GB * rig.roofline_fraction
    kv_bytes = rig.kv_bytes_per_token_f16 * KV_BYTES_PER_ELEMENT[rig.cache_type] / KV_BYTES_PER_ELEMENT["f16"]
    p40 = gpu_spec("Tesla P40")
    prefill_tok_s = (P40_PP512_TOK_S * spec.fp32_tflops / p40.fp32_tflops * P40_MODEL_BILLIONS / rig.model_billions
                     * rig.prefill_efficiency)
    hop_s = 0.0
    if rig.hop_bytes_per_token > 0 and rig.gpus > 1 and rig.link_gbs > 0:
        hop_s = (rig.gpus - 1) * rig.hop_bytes_per_token / (rig.link_gbs * GB)
    restore_s, save_s = 0.0, 0.0
    if rig.slot_copy_gbs > 0:
        restore_s = kv_bytes / (rig.slot_copy_gbs * GB)
        save_s = restore_s + (kv_bytes / (rig.slot_write_gbs * GB) if rig.slot_write_gbs > 0 else 0.0)
    cost = CostModel(prefill_s_per_token=1.0 / prefill_tok_s + hop_s, decode_s_per_token=decode_s,
                     decode_s_per_extra_slot=decode_s * rig.extra_slot_fraction,
                     decode_s_per_context_token=kv_bytes / effective_bytes_s,
                     request_overhead_s=rig.request_overhead_s, batch_tokens=DEFAULT_BATCH_TOKENS,
                     cache_type=rig.cache_type, slot_save_s_per_token=save_s, slot_restore_s_per_token=restore_s)
    bench = "bench on the rig's worker"
    assumptions = [
        Assumption("memory bandwidth per card", spec.bandwidth_gbs, "GB/s",
                   f"{spec.name} data sheet (research/roofline.py GPU_SPECS)", "llama-bench tg128 on the rig"),
        Assumption("memory per card", spec.memory_gb, "GB", f"{spec.name} data sheet", "nvidia-smi on the rig"),
        Assumption("cards per worker", rig.gpus, "GPUs", "the configuration planned", "-"),
        Assumption("weights read per token", rig.weight_gb, "GB", rig.weights_source,
                   "fleet/gguf.py facts of the served GGUF (the rig agent reports them)"),
        Assumption("weights held by the cards", rig.held_weight_gb, "GB",
                   "the same as read per token (a dense model)" if rig.total_weight_gb is None else
                   "every expert's weights: a mixture of experts holds its total parameters, a token reads its "
                   "active ones", "the served GGUF's file size (fleet/gguf.py) and the worker's startup log"),
        Assumption("fraction of the decode roofline reached", rig.roofline_fraction, "", rig.roofline_source,
                   f"{bench}: TPOT at concurrency 1 (calibrate_worker)"),
        Assumption("decode time added per extra slot", rig.extra_slot_fraction, "of one step",
                   "assumption: a batched step reads the weights once; compute and per-slot overheads only",
                   f"{bench}: a concurrency sweep 1, 2, 4, 8 (calibrate_worker)"),
        Assumption("KV cache bytes per token (f16)", rig.kv_bytes_per_token_f16, "bytes", rig.kv_source,
                   "fleet/gguf.py facts of the served GGUF"),
        Assumption("KV cache type", KV_BYTES_PER_ELEMENT[rig.cache_type], f"bytes per element ({rig.cache_type})",
                   "fleet/gguf.py KV_BYTES_PER_ELEMENT", "-"),
        Assumption("prompt evaluation rate", round(prefill_tok_s, 1), "tokens/s",
                   f"2 x P40 Qwen3-32B pp512 = {P40_PP512_TOK_S:g} tok/s (ik_llama.cpp PR #2151, "
                   f"docs/hardware.md) x FP32 {spec.fp32_tflops:g}/{p40.fp32_tflops:g} TFLOPS "
                   f"x {P40_MODEL_BILLIONS:g}B/{rig.model_billions:g}B parameters a token touches"
                   + (f" x {rig.prefill_efficiency:g} (a mixture of experts' routing: assumption, no public Pascal "
                      "figure found)" if rig.prefill_efficiency != 1 else "")
                   + (f" + {hop_s * 1e3:.3f} ms a token for {rig.gpus - 1} card boundaries "
                      f"({rig.hop_bytes_per_token / 1e3:g} KB of activations at {rig.link_gbs:g} GB/s)" if hop_s else ""),
                   f"llama-bench -p 512 and {bench}: a prompt-size sweep at concurrency 1"),
        Assumption("prompt time per (new token, token before it in the slot)", 0.0, "s",
                   "assumption: folded into the pp512 rate (the CPU demo measured ~1-1.5 us a pair)",
                   f"{bench}: turns after a 512-token cached prefix (bench --prefix-tokens 512)"),
        Assumption("extra prompt time per cached token for a small chunk's first tokens", 0.0, "s",
                   "assumption: not measured on a GPU (the CPU demo's: ~3.5-6 us a pair for a chunk's first "
                   "32 tokens, docs/research/planner.md)",
                   f"{bench}: 16 to 256 tokens after a 512-token cached prefix, 16 and 64 after 1,280 "
                   "(scripts/validate_planner.sh)"),
        Assumption("request overhead before the first prompt token", rig.request_overhead_s, "s",
                   "assumption: HTTP, the gateway, the chat template and tokenizing a long prompt",
                   f"{bench}: the intercept of the prompt-size sweep"),
        Assumption("batch size", DEFAULT_BATCH_TOKENS, "tokens", "llama-server's default -b", "the worker's launch"),
        Assumption("slowdown per other worker computing at once", 0.0, "of a step",
                   "assumption: each worker has cards of its own (a rig's host CPU and PCIe links are shared, "
                   "taken as idle while the cards compute)",
                   "bench one worker alone, then every worker of the rig at once "
                   "(calibrate_worker --loaded-label)"),
        Assumption("slot file copy rate between a card and the host", rig.slot_copy_gbs, "GB/s",
                   "assumption: PCIe Gen1 x1 on risers (docs/hardware.md): 250 MB/s a direction, ~80 % "
                   "after packet overhead; llama.cpp copies a slot's KV layer by layer, one link at a time "
                   f"(a handover of a 10,000-token prompt: {restore_s * 10_000:.1f} s to restore)",
                   f"{bench}: calibrate_worker --slot-files (llama-server's own save and restore times)"),
        Assumption("slot file write rate to the host's disk", rig.slot_write_gbs, "GB/s",
                   "assumption: the CPU demo's saves (18-25 us per 23 KB SmolLM2 token, ~1 GB/s, "
                   "docs/research/planner.md); a restore reads the file back from the page cache, taken as free",
                   f"{bench}: calibrate_worker --slot-files"),
        Assumption("compute buffer per card", rig.compute_buffer_gb_per_gpu, "GB",
                   "assumption (llama.cpp's CUDA compute buffers are a few hundred MB per card)",
                   "the worker's startup log (CUDA buffer sizes)"),
    ]
    memory = {"gpus": rig.gpus, "memory_gb_per_gpu": spec.memory_gb, "weight_gb": rig.held_weight_gb,
              "kv_bytes_per_token_f16": rig.kv_bytes_per_token_f16,
              "compute_buffer_gb_per_gpu": rig.compute_buffer_gb_per_gpu}
    return cost, assumptions, memory


def memory_check(memory: dict[str, Any], *, slots: int, context_tokens: int, cache_type: str) -> tuple[bool, str]:
    """Whether `slots` slots of `context_tokens` with a `cache_type` KV cache fit the worker's cards
    beside its weights; (True, "") when `memory` holds no facts (a fitted calibration)."""
    if not memory:
        return True, ""
    kv_gb = (float(memory["kv_bytes_per_token_f16"]) * KV_BYTES_PER_ELEMENT[cache_type] / KV_BYTES_PER_ELEMENT["f16"]
             * slots * context_tokens / GB)
    need = float(memory["weight_gb"]) + kv_gb + float(memory["compute_buffer_gb_per_gpu"]) * int(memory["gpus"])
    have = float(memory["memory_gb_per_gpu"]) * int(memory["gpus"])
    detail = (f"weights {float(memory['weight_gb']):.1f} GB + KV {kv_gb:.1f} GB ({slots} x {context_tokens} tokens, "
              f"{cache_type}) + buffers = {need:.1f} GB of {have:.0f} GB")
    return need <= have, detail
