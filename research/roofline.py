"""The bandwidth roofline for single-stream decode: pure maths plus a GGUF reader, no Django.

Single-stream decode is memory-bandwidth bound: each generated token reads every weight once
(and the KV cache of the context so far). So

    ceiling tokens/s = effective bandwidth (bytes/s) / bytes read per token.

Units: GB means 10**9 bytes and GB/s 10**9 bytes per second, as GPU data sheets count them.

Split modes (llama.cpp `--split-mode`), with GPU i holding share s_i of the weights
(`--tensor-split`, normalised; equal shares when it is not set) and reading at B_i:
- `none`: one GPU holds and reads everything: time per token = W / B.
- `layer` (the default): a pipeline, one GPU works at a time, each on its own layers:
  time per token = sum over GPUs of s_i x W / B_i. With equal cards that is W / B, however many.
- `row`, `tensor`: every GPU reads its share of each matrix at once and waits for the others:
  time per token = max over GPUs of s_i x W / B_i, so the slowest share decides; an upper bound
  that PCIe synchronisation (x1 risers) keeps far away in practice.
The ceiling is then 1 / time per token; the effective bandwidth reported is W / time.

What a token reads is `GgufFacts.weight_bytes_per_token` (fleet/gguf.py, which reads the file;
the rig agent reports the same facts, so none of this needs the file on this machine).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fleet.gguf import KV_BYTES_PER_ELEMENT, GgufFacts, kv_bytes_per_token, read_gguf

__all__ = ["GB", "GPU_SPECS", "KV_BYTES_PER_ELEMENT", "SPLIT_MODES", "GgufFacts", "GpuSpec", "Roofline",
           "decode_ceiling_tok_s", "effective_bandwidth_gbs", "gpu_spec", "kv_bytes_per_token", "normalized_shares",
           "percent_of_ceiling", "read_gguf", "roofline", "roofline_for_gguf", "split_roofline"]

GB = 1e9


@dataclass(frozen=True)
class GpuSpec:
    """Data-sheet numbers: memory in GB, bandwidth in GB/s, FP32 TFLOPS, CUDA compute capability."""

    name: str
    memory_gb: float
    bandwidth_gbs: float
    fp32_tflops: float
    compute_capability: str
    note: str = ""


GPU_SPECS: dict[str, GpuSpec] = {
    spec.name: spec
    for spec in [
        GpuSpec("GTX 1070", 8, 256, 6.5, "6.1", "the rigs; GDDR5, FP16 at 1/64 rate, no tensor cores"),
        GpuSpec("GTX 1080", 8, 320, 8.9, "6.1", "GDDR5X"),
        GpuSpec("GTX 1080 Ti", 11, 484, 11.3, "6.1"),
        GpuSpec("Tesla P40", 24, 347, 11.8, "6.1", "Pascal datacenter card, the published 3 x P40 numbers"),
        GpuSpec("RTX 2060", 6, 336, 6.5, "7.5"),
        GpuSpec("RTX 3060 12GB", 12, 360, 12.7, "8.6"),
        GpuSpec("RTX 3090", 24, 936, 35.6, "8.6"),
        GpuSpec("RTX 4060 Ti 16GB", 16, 288, 22.1, "8.9"),
        GpuSpec("RTX 4090", 24, 1008, 82.6, "8.9"),
        GpuSpec("Tesla T4", 16, 320, 8.1, "7.5"),
        GpuSpec("A100 40GB", 40, 1555, 19.5, "8.0"),
        GpuSpec("H100 SXM", 80, 3350, 67.0, "9.0"),
        GpuSpec("H200", 141, 4800, 67.0, "9.0"),
    ]
}

SPLIT_MODES = ("none", "layer", "row", "tensor")


def gpu_spec(name: str) -> GpuSpec:
    """Looks a card up by name, ignoring case and spaces; KeyError lists the known cards."""
    wanted = name.replace(" ", "").lower()
    for spec in GPU_SPECS.values():
        if spec.name.replace(" ", "").lower() == wanted:
            return spec
    raise KeyError(f"unknown GPU {name!r}; known: {', '.join(GPU_SPECS)}")


def effective_bandwidth_gbs(*, bandwidth_gbs: float, gpus: int, split_mode: str) -> float:
    """Equal cards, equal shares: one GPU's bandwidth for `none`/`layer`; the sum for
    `row`/`tensor` (an upper bound)."""
    if split_mode not in SPLIT_MODES:
        raise ValueError(f"split mode {split_mode!r}: expected one of {', '.join(SPLIT_MODES)}")
    if gpus < 1 or bandwidth_gbs <= 0:
        raise ValueError("need at least one GPU and a positive bandwidth")
    return bandwidth_gbs * (gpus if split_mode in ("row", "tensor") else 1)


def normalized_shares(shares: Sequence[float], gpus: int) -> tuple[float, ...]:
    """`--tensor-split` proportions as fractions summing to 1 (equal when none are given)."""
    if gpus < 1:
        raise ValueError("need at least one GPU")
    if not shares:
        return tuple(1.0 / gpus for _ in range(gpus))
    if len(shares) != gpus or any(share < 0 for share in shares) or sum(shares) <= 0:
        raise ValueError(f"tensor split {list(shares)}: needs {gpus} non-negative shares, not all zero")
    total = float(sum(shares))
    return tuple(share / total for share in shares)


def seconds_per_byte(*, bandwidths_gbs: Sequence[float], split_mode: str, shares: Sequence[float] = ()) -> float:
    """Seconds to read one byte of the model's per-token reads across its GPUs (module docstring)."""
    if split_mode not in SPLIT_MODES:
        raise ValueError(f"split mode {split_mode!r}: expected one of {', '.join(SPLIT_MODES)}")
    if not bandwidths_gbs or any(b <= 0 for b in bandwidths_gbs):
        raise ValueError("need at least one GPU and a positive bandwidth")
    if split_mode == "none":
        return 1.0 / (bandwidths_gbs[0] * GB)
    fractions = normalized_shares(shares, len(bandwidths_gbs))
    times = [fraction / (bandwidth * GB) for fraction, bandwidth in zip(fractions, bandwidths_gbs)]
    return sum(times) if split_mode == "layer" else max(times)


def decode_ceiling_tok_s(*, bytes_per_token: float, bandwidth_gbs: float) -> float:
    """Bandwidth-bound single-stream decode ceiling in tokens/s."""
    if bytes_per_token <= 0:
        raise ValueError("bytes per token must be positive")
    return bandwidth_gbs * GB / bytes_per_token


def percent_of_ceiling(*, measured_tok_s: float, ceiling_tok_s: float) -> float:
    return 100.0 * measured_tok_s / ceiling_tok_s


@dataclass(frozen=True)
class Roofline:
    """A decode ceiling and the numbers it came from (bytes, GB/s, tokens/s)."""

    weight_bytes: float
    kv_bytes: float
    bandwidth_gbs: float
    gpus: int
    split_mode: str
    ceiling_tok_s: float
    shares: tuple[float, ...] = ()
    gpu_bandwidths_gbs: tuple[float, ...] = field(default_factory=tuple)

    @property
    def bytes_per_token(self) -> float:
        return self.weight_bytes + self.kv_bytes

    def percent(self, measured_tok_s: float | None) -> float | None:
        if measured_tok_s is None:
            return None
        return percent_of_ceiling(measured_tok_s=measured_tok_s, ceiling_tok_s=self.ceiling_tok_s)

    def as_dict(self) -> dict[str, float | int | str | list[float]]:
        return {
            "weight_gb": self.weight_bytes / GB,
            "kv_gb": self.kv_bytes / GB,
            "bandwidth_gbs": self.bandwidth_gbs,
            "gpus": self.gpus,
            "split_mode": self.split_mode,
            "ceiling_tok_s": self.ceiling_tok_s,
            "shares": [round(share, 4) for share in self.shares],
            "gpu_bandwidths_gbs": list(self.gpu_bandwidths_gbs),
        }


def roofline(
    *,
    weight_bytes: float,
    bandwidth_gbs: float,
    gpus: int = 1,
    split_mode: str = "layer",
    kv_bytes_per_token_read: float = 0.0,
    context_tokens: int = 0,
) -> Roofline:
    """The single-stream decode ceiling for `weight_bytes` of weights read per token, plus the KV
    cache of `context_tokens` already in context (`kv_bytes_per_token_read` bytes each), on
    `gpus` equal cards of `bandwidth_gbs` with equal shares."""
    if gpus < 1:
        raise ValueError("need at least one GPU and a positive bandwidth")
    return split_roofline(weight_bytes=weight_bytes, bandwidths_gbs=[bandwidth_gbs] * gpus, split_mode=split_mode,
                          kv_bytes_per_token_read=kv_bytes_per_token_read, context_tokens=context_tokens)


def split_roofline(
    *,
    weight_bytes: float,
    bandwidths_gbs: Sequence[float],
    split_mode: str = "layer",
    shares: Sequence[float] = (),
    kv_bytes_per_token_read: float = 0.0,
    context_tokens: int = 0,
) -> Roofline:
    """The ceiling on the worker's own GPUs: `bandwidths_gbs` one per GPU in CUDA order,
    `shares` its `--tensor-split` (module docstring: layer split sums the GPUs' times, row and
    tensor split wait for the slowest share). The KV reads are split like the weights."""
    kv_bytes = kv_bytes_per_token_read * max(context_tokens, 0)
    per_byte = seconds_per_byte(bandwidths_gbs=bandwidths_gbs, split_mode=split_mode, shares=shares)
    bytes_per_token = weight_bytes + kv_bytes
    if bytes_per_token <= 0:
        raise ValueError("bytes per token must be positive")
    effective = 1.0 / per_byte / GB
    used = 1 if split_mode == "none" else len(bandwidths_gbs)
    return Roofline(
        weight_bytes=weight_bytes,
        kv_bytes=kv_bytes,
        bandwidth_gbs=effective,
        gpus=len(bandwidths_gbs),
        split_mode=split_mode,
        ceiling_tok_s=decode_ceiling_tok_s(bytes_per_token=bytes_per_token, bandwidth_gbs=effective),
        shares=(1.0,) if split_mode == "none" else normalized_shares(shares, used),
        gpu_bandwidths_gbs=tuple(float(b) for b in bandwidths_gbs),
    )


def roofline_for_gguf(
    facts: GgufFacts,
    *,
    bandwidth_gbs: float | None = None,
    gpus: int = 1,
    split_mode: str = "layer",
    context_tokens: int = 0,
    cache_type: str = "f16",
    bandwidths_gbs: Sequence[float] = (),
    shares: Sequence[float] = (),
) -> Roofline:
    """The roofline of a model from its GGUF facts: on `gpus` cards of `bandwidth_gbs`, or on the
    cards of `bandwidths_gbs` (one per GPU) with `shares`."""
    per_gpu = list(bandwidths_gbs) or ([bandwidth_gbs] * gpus if bandwidth_gbs is not None else [])
    if not per_gpu:
        raise ValueError("give bandwidth_gbs or bandwidths_gbs")
    return split_roofline(
        weight_bytes=facts.weight_bytes_per_token,
        bandwidths_gbs=per_gpu,
        split_mode=split_mode,
        shares=shares,
        kv_bytes_per_token_read=facts.kv_bytes_per_token(cache_type),
        context_tokens=context_tokens,
    )
