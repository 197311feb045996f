"""What a GGUF model file says about itself: sizes and shape. Pure: no Django.

The rig agent reads these facts next to the file and reports them when it registers its
workers (`GgufFacts.as_dict()`), so the control plane can compute a roofline or a context plan
for a model whose file it does not have (`GgufFacts.from_dict()`). Sizes are bytes.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

# Bytes per cached K or V element by llama.cpp cache type (`--cache-type-k/v`): q8_0 blocks are
# 32 values in 34 bytes, q4_0 32 in 18.
KV_BYTES_PER_ELEMENT = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}

_LAYER_TENSOR = re.compile(r"^blk\.(\d+)\.")


def kv_bytes_per_token(*, layers: int, kv_heads: int, head_dim: int, cache_type: str = "f16",
                       value_head_dim: int | None = None) -> float:
    """K and V of one token in every attention layer: layers x KV heads x (K dim + V dim) x
    bytes per element; with equal K and V dims that is 2 x layers x KV heads x head dim x bytes."""
    if cache_type not in KV_BYTES_PER_ELEMENT:
        raise ValueError(f"cache type {cache_type!r}: expected one of {', '.join(KV_BYTES_PER_ELEMENT)}")
    value_dim = head_dim if value_head_dim is None else value_head_dim
    return layers * kv_heads * (head_dim + value_dim) * KV_BYTES_PER_ELEMENT[cache_type]


@dataclass(frozen=True)
class GgufFacts:
    """What the roofline and the context plan need from a GGUF: sizes in bytes, shape from the
    metadata. `layer_bytes[i]`: bytes of the tensors of block i (what a GPU holding that layer
    reads per token); `context_length`: the context the model was trained with."""

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
    value_head_dim: int = 0  # 0: same as head_dim
    layer_bytes: tuple[int, ...] = ()

    @property
    def weight_bytes_per_token(self) -> int:
        """Weights a decode step reads: every tensor except the token embedding table, of which a
        token reads one row; a model with tied embeddings (no `output.weight`) reads the whole
        table again as its output projection, so it is counted then."""
        if self.tied_embeddings:
            return self.tensor_bytes
        return self.tensor_bytes - self.token_embedding_bytes

    def kv_bytes_per_token(self, cache_type: str = "f16") -> float:
        return kv_bytes_per_token(layers=self.layers, kv_heads=self.kv_heads, head_dim=self.head_dim,
                                  cache_type=cache_type, value_head_dim=self.value_head_dim or None)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, as the agent reports it."""
        data = asdict(self)
        data["layer_bytes"] = list(self.layer_bytes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GgufFacts":
        """The facts as reported; ValueError when a required one is missing or of the wrong kind."""
        values: dict[str, Any] = {}
        for name in (f.name for f in fields(cls)):
            if name in data:
                values[name] = data[name]
            elif name in _OPTIONAL:
                values[name] = _OPTIONAL[name]
            else:
                raise ValueError(f"GGUF facts: `{name}` is missing")
        try:
            values["layer_bytes"] = tuple(int(b) for b in values["layer_bytes"] or ())
            for name in _COUNTS:
                values[name] = int(values[name])
        except (TypeError, ValueError):
            raise ValueError("GGUF facts: sizes and counts must be whole numbers") from None
        values["tied_embeddings"] = bool(values["tied_embeddings"])
        values["architecture"], values["name"], values["path"] = (
            str(values["architecture"]), str(values["name"]), str(values["path"]))
        return cls(**values)


_OPTIONAL: dict[str, Any] = {"path": "", "name": "", "file_type": None, "value_head_dim": 0, "layer_bytes": ()}
_COUNTS = ("file_bytes", "tensor_bytes", "token_embedding_bytes", "layers", "embedding_length", "heads", "kv_heads",
           "head_dim", "context_length", "vocab_size", "parameters", "value_head_dim")


def gguf_report(path: Path | str) -> dict[str, Any] | None:
    """The facts the agent reports for a worker's model file; None when it cannot be read (no
    `gguf` package, no file, not a GGUF): the worker still runs, only the roofline is missing."""
    try:
        return read_gguf(path).as_dict()
    except (ImportError, OSError, ValueError, KeyError, IndexError):
        return None


def read_gguf(path: Path | str) -> GgufFacts:
    """Reads the tensor sizes and the shape metadata of a GGUF file (with PyPI's `gguf`, which
    maps the file: a 16 GB model reads in well under a second)."""
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
    per_layer: dict[int, int] = {}
    for tensor in reader.tensors:
        size = int(tensor.n_bytes)
        tensor_bytes += size
        parameters += int(tensor.n_elements)
        if tensor.name == "token_embd.weight":
            token_embedding_bytes = size
            vocab = int(max(tensor.shape))
        elif tensor.name == "output.weight":
            has_output = True
        elif (match := _LAYER_TENSOR.match(tensor.name)) is not None:
            per_layer[int(match.group(1))] = per_layer.get(int(match.group(1)), 0) + size
    layers = arch_int("block_count")
    embedding = arch_int("embedding_length")
    heads = arch_int("attention.head_count", 1)
    kv_heads = arch_int("attention.head_count_kv", heads)
    head_dim = arch_int("attention.key_length", embedding // heads if heads else 0)
    value_dim = arch_int("attention.value_length", head_dim)
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
        value_head_dim=value_dim if value_dim != head_dim else 0,
        context_length=arch_int("context_length"),
        vocab_size=vocab,
        parameters=parameters,
        layer_bytes=tuple(per_layer.get(i, 0) for i in range(max(per_layer, default=-1) + 1)),
    )
