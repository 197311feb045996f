"""The bandwidth roofline for single-stream decode: pure maths plus a GGUF reader, no Django.

Single-stream decode is memory-bandwidth bound: each generated token reads every weight once
(and the KV cache of the context so far). So

    ceiling tokens/s = effective bandwidth (bytes/s) / bytes read per token.

Units: GB means 10**9 bytes and GB/s 10**9 bytes per second, as GPU data sheets count them.

Split modes (llama.cpp `--split-mode`):
- `none`, `layer` (the default): one GPU works at a time (layer split is a pipeline), so the
  effective bandwidth is one GPU's, however many GPUs hold the model.
- `row`, `tensor`: every GPU reads its share of each matrix at once, so the ideal effective
  bandwidth is the sum; the ceiling is an upper bound that PCIe synchronisation (x1 risers)
  keeps far away in practice.

What a token reads: every tensor except the token embedding table, of which a token reads one
row; a model with tied embeddings (no `output.weight`) reads the whole table again as its output
projection, so it is counted then.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    """One GPU's bandwidth for `none`/`layer`; the sum for `row`/`tensor` (an upper bound)."""
    if split_mode not in SPLIT_MODES:
        raise ValueError(f"split mode {split_mode!r}: expected one of {', '.join(SPLIT_MODES)}")
    if gpus < 1 or bandwidth_gbs <= 0:
        raise ValueError("need at least one GPU and a positive bandwidth")
    return bandwidth_gbs * (gpus if split_mode in ("row", "tensor") else 1)


def decode_ceiling_tok_s(*, bytes_per_token: float, bandwidth_gbs: float) -> float:
    """Bandwidth-bound single-stream decode ceiling in tokens/s."""
    if bytes_per_token <= 0:
        raise ValueError("bytes per token must be positive")
    return bandwidth_gbs * GB / bytes_per_token


def percent_of_ceiling(*, measured_tok_s: float, ceiling_tok_s: float) -> float:
    return 100.0 * measured_tok_s / ceiling_tok_s


KV_BYTES_PER_ELEMENT = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


def kv_bytes_per_token(*, layers: int, kv_heads: int, head_dim: int, cache_type: str = "f16") -> float:
    """2 (K and V) x attention layers x KV heads x head dim x bytes per element."""
    return 2 * layers * kv_heads * head_dim * KV_BYTES_PER_ELEMENT[cache_type]


@dataclass(frozen=True)
class GgufFacts:
    """What the roofline needs from a GGUF: sizes in bytes, shape from the metadata."""

    path: str
    architecture: str
    name: str
    file_type: int | None
    file_bytes: int
    tensor_bytes: int
    token_embedding_bytes: int
    tied_embeddings: bool
    layers: int
    embedding_length: int
    heads: int
    kv_heads: int
    head_dim: int
    context_length: int
    vocab_size: int
    parameters: int

    @property
    def weight_bytes_per_token(self) -> int:
        """Weights a decode step reads (see the module docstring for the embedding rule)."""
        if self.tied_embeddings:
            return self.tensor_bytes
        return self.tensor_bytes - self.token_embedding_bytes

    def kv_bytes_per_token(self, cache_type: str = "f16") -> float:
        return kv_bytes_per_token(
            layers=self.layers, kv_heads=self.kv_heads, head_dim=self.head_dim, cache_type=cache_type
        )


def read_gguf(path: Path | str) -> GgufFacts:
    """Reads the tensor sizes and the shape metadata of a GGUF file (with PyPI's `gguf`)."""
    from gguf import GGUFReader  # numpy-heavy; imported only when a file is read

    reader = GGUFReader(str(path))

    def field(key: str) -> object | None:
        found = reader.fields.get(key)
        if found is None or not found.data:
            return None
        return found.contents()

    architecture = str(field("general.architecture") or "llama")

    def arch_int(key: str, default: int = 0) -> int:
        value = field(f"{architecture}.{key}")
        if isinstance(value, list):  # per-layer arrays (some models): take the largest
            value = max(value) if value else None
        return int(value) if isinstance(value, (int, float)) else default

    tensor_bytes = 0
    parameters = 0
    token_embedding_bytes = 0
    has_output = False
    vocab = 0
    for tensor in reader.tensors:
        tensor_bytes += int(tensor.n_bytes)
        parameters += int(tensor.n_elements)
        if tensor.name == "token_embd.weight":
            token_embedding_bytes = int(tensor.n_bytes)
            vocab = int(max(tensor.shape))
        elif tensor.name == "output.weight":
            has_output = True
    layers = arch_int("block_count")
    embedding = arch_int("embedding_length")
    heads = arch_int("attention.head_count", 1)
    kv_heads = arch_int("attention.head_count_kv", heads)
    head_dim = arch_int("attention.key_length", embedding // heads if heads else 0)
    file_type = field("general.file_type")
    return GgufFacts(
        path=str(path),
        architecture=architecture,
        name=str(field("general.name") or Path(path).stem),
        file_type=int(file_type) if isinstance(file_type, int) else None,
        file_bytes=Path(path).stat().st_size,
        tensor_bytes=tensor_bytes,
        token_embedding_bytes=token_embedding_bytes,
        tied_embeddings=not has_output,
        layers=layers,
        embedding_length=embedding,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        context_length=arch_int("context_length"),
        vocab_size=vocab,
        parameters=parameters,
    )


@dataclass(frozen=True)
class Roofline:
    """A decode ceiling and the numbers it came from (bytes, GB/s, tokens/s)."""

    weight_bytes: float
    kv_bytes: float
    bandwidth_gbs: float
    gpus: int
    split_mode: str
    ceiling_tok_s: float

    @property
    def bytes_per_token(self) -> float:
        return self.weight_bytes + self.kv_bytes

    def percent(self, measured_tok_s: float | None) -> float | None:
        if measured_tok_s is None:
            return None
        return percent_of_ceiling(measured_tok_s=measured_tok_s, ceiling_tok_s=self.ceiling_tok_s)

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "weight_gb": self.weight_bytes / GB,
            "kv_gb": self.kv_bytes / GB,
            "bandwidth_gbs": self.bandwidth_gbs,
            "gpus": self.gpus,
            "split_mode": self.split_mode,
            "ceiling_tok_s": self.ceiling_tok_s,
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
    cache of `context_tokens` already in context (`kv_bytes_per_token_read` bytes each)."""
    kv_bytes = kv_bytes_per_token_read * max(context_tokens, 0)
    effective = effective_bandwidth_gbs(bandwidth_gbs=bandwidth_gbs, gpus=gpus, split_mode=split_mode)
    return Roofline(
        weight_bytes=weight_bytes,
        kv_bytes=kv_bytes,
        bandwidth_gbs=effective,
        gpus=gpus,
        split_mode=split_mode,
        ceiling_tok_s=decode_ceiling_tok_s(bytes_per_token=weight_bytes + kv_bytes, bandwidth_gbs=effective),
    )


def roofline_for_gguf(
    facts: GgufFacts,
    *,
    bandwidth_gbs: float,
    gpus: int = 1,
    split_mode: str = "layer",
    context_tokens: int = 0,
    cache_type: str = "f16",
) -> Roofline:
    return roofline(
        weight_bytes=facts.weight_bytes_per_token,
        bandwidth_gbs=bandwidth_gbs,
        gpus=gpus,
        split_mode=split_mode,
        kv_bytes_per_token_read=facts.kv_bytes_per_token(cache_type),
        context_tokens=context_tokens,
    )
