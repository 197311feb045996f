"""Which model, placement, slots and KV cache the rigs should run for a class: a bounded search
over the configurations, each predicted by the planner's simulator. Pure (no Django): the
gateway's settings come in as a FleetPlan template, the cost models from assumptions.py.

A configuration is a candidate model, cards per worker (workers per rig = the rig's cards / that,
a layer split inside a worker), slots x context per slot, a KV cache type, and the shared prefix
(OCS_SHARED_PREFIX_K) off or on. The search:

1. prunes by memory first: a placement whose cards cannot hold the model's total weights (every
   expert of a mixture of experts) plus a compute buffer per card is never proposed, and of those
   that can, only the smallest and the next (`placements_tried`: more cards per worker than that
   only trade workers for context a slot, with the same prompt rate); for each
   slot count and KV type the context per slot is the largest that fits (a multiple of
   CONTEXT_STEP, at most MAX_CONTEXT), and a configuration whose context is under the smallest the
   class's clients work with (`minimum_context`) is dropped; a lower-quality KV type is not tried
   where a better one already reaches MAX_CONTEXT;
2. simulates each configuration left at the class sizes in ascending order, stopping at the first
   size that misses a target (agents' p95 TTFT, refused turns counted as infinite; chat's p95);
3. ranks by students served (the largest size met, every smaller one met too), then the agents'
   p95 at that size, then KV quality (f16, q8_0, q4_0), then the larger model.

The speeds come from RigAssumptions: decode from the bandwidth roofline over the weights a token
reads (the active ones), prefill from the public 2 x P40 pp512 scaled by FP32 and the parameters a
token touches; every number is labelled (`rate_assumptions`, ModelCandidate's sources).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fleet.gguf import KV_BYTES_PER_ELEMENT, GgufFacts
from research.class_metrics import AGENT_PERSONAS
from research.planner.assumptions import Assumption, RigAssumptions, assumed_cost
from research.planner.cost import CostModel
from research.planner.plan import ClassPlan, predict, scaled_mix
from research.planner.report import p95_s
from research.planner.sim import FleetPlan
from research.roofline import GB, gpu_spec

CONTEXT_STEP = 8192
# Qwen3's models are trained at 32,768 tokens and their model cards give YaRN x4 (131,072) as the
# most they extend to; past 32,768 llama-server needs `--rope-scaling yarn --rope-scale 4
# --yarn-orig-ctx 32768` (the 2507 releases hold 262,144 natively).
MAX_CONTEXT = 131072
CACHE_TYPES = ("f16", "q8_0", "q4_0")  # best quality first
SLOT_CHOICES = (1, 2, 4, 8)
SHARED_PREFIX_K = 3
Q4_K_M_BYTES_PER_WEIGHT = 0.6  # ~4.8 bits a weight on average (rig-forecast.md; 16.2 GB for the 27B)
Q4_K_M_SOURCE = ("Q4_K_M at ~4.8 bits a weight (0.6 bytes): the 27B's 16.2 GB in docs/hardware.md; "
                 "Qwen3-30B-A3B Q4_K_M is an 18.6 GB file (bartowski's GGUF), 30.5B x 0.6 = 18.3 GB")


@dataclass(frozen=True)
class ClientContext:
    persona: str
    tokens: int
    source: str


# The smallest context per slot each client of the class replay works with.
CLIENT_CONTEXTS = {
    "agent": ClientContext("agent", 32768,
                           "the Copilot CLI's first request is 5,000-22,000 tokens with its 17 tools inline "
                           "(research/class_personas.py at scale 1); 32,768 leaves room for a few tool turns. "
                           "Assumption: the client's own minimum is not documented"),
    "claude": ClientContext("claude", 32768,
                            "Claude Code's first request alone is ~20,000 tokens with its 24 tools "
                            "(docs/research/class-replay.md); a 16,384-token slot refuses every turn "
                            "(docs/research/rig-forecast.md)"),
    "codex": ClientContext("codex", 32768,
                           "assumption: as the other agents (the Codex CLI's first request: two developer items, "
                           "9 tools, research/class_personas.py)"),
    "chat": ClientContext("chat", 8192, "assumption: a short system prompt and a thread of short questions"),
    "burst": ClientContext("burst", 4096, "assumption: independent prompts of a few hundred tokens"),
}


def minimum_context(mix: dict[str, int]) -> ClientContext:
    """The context per slot every client in `mix` works with: the largest of their minimums."""
    present = [CLIENT_CONTEXTS[name] for name in mix if name in CLIENT_CONTEXTS and mix[name] > 0]
    if not present:
        raise ValueError("the mix names no persona of the class replay")
    return max(present, key=lambda item: item.tokens)


@dataclass(frozen=True)
class ModelCandidate:
    """A model as the search needs it. Weights in GB = billions x bytes per weight (GB = 10**9)."""

    key: str
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    active_billions: float  # parameters a token touches (decode reads them, prefill computes them)
    total_billions: float  # parameters the cards hold
    bytes_per_weight: float
    quant: str
    source: str  # where the geometry and parameter counts come from
    weights_source: str = Q4_K_M_SOURCE

    @property
    def moe(self) -> bool:
        return self.total_billions > self.active_billions

    @property
    def active_gb(self) -> float:
        return self.active_billions * self.bytes_per_weight

    @property
    def total_gb(self) -> float:
        return self.total_billions * self.bytes_per_weight

    def kv_bytes_per_token(self, cache_type: str = "f16") -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * KV_BYTES_PER_ELEMENT[cache_type]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "moe": self.moe, "active_gb": self.active_gb, "total_gb": self.total_gb}


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


PRESETS: dict[str, ModelCandidate] = {m.key: m for m in (
    ModelCandidate("dense-27b", "the seed's 27B (planned Qwen3-32B-like), Q4_K_M", 64, 8, 128, 5120, 27.0, 27.0,
                   Q4_K_M_BYTES_PER_WEIGHT, "Q4_K_M",
                   "docs/hardware.md: the rigs' ~27B planned with Qwen3-32B's geometry (" + _hf("Qwen/Qwen3-32B")
                   + "), 27B parameters as the seed's file; the served file's facts replace it"),
    ModelCandidate("dense-14b", "Qwen3-14B, Q4_K_M", 40, 8, 128, 5120, 14.8, 14.8, Q4_K_M_BYTES_PER_WEIGHT,
                   "Q4_K_M", _hf("Qwen/Qwen3-14B") + " (40 layers, 8 KV heads, head 128; 14.8B parameters, model card)"),
    ModelCandidate("dense-8b", "Qwen3-8B, Q4_K_M", 36, 8, 128, 4096, 8.2, 8.2, Q4_K_M_BYTES_PER_WEIGHT, "Q4_K_M",
                   _hf("Qwen/Qwen3-8B") + " (36 layers, 8 KV heads, head 128; 8.2B parameters, model card)"),
    ModelCandidate("moe-30b-a3b", "Qwen3-30B-A3B (mixture of experts), Q4_K_M", 48, 4, 128, 2048, 3.3, 30.5,
                   Q4_K_M_BYTES_PER_WEIGHT, "Q4_K_M",
                   _hf("Qwen/Qwen3-30B-A3B") + " (48 layers, 4 KV heads, head 128, 128 experts of which 8 a "
                   "token; 30.5B parameters, 3.3B active, model card)"),
    ModelCandidate("dense-4b", "Qwen3-4B, Q4_K_M", 36, 8, 128, 2560, 4.0, 4.0, Q4_K_M_BYTES_PER_WEIGHT, "Q4_K_M",
                   _hf("Qwen/Qwen3-4B") + " (36 layers, 8 KV heads, head 128; 4.0B parameters, model card)"),
)}


def candidate_from_gguf(facts: GgufFacts, *, key: str = "", active_billions: float | None = None) -> ModelCandidate:
    """A candidate from a GGUF file's facts (fleet/gguf.py): its geometry and its real bytes per
    weight; a mixture of experts' active parameters are not in GgufFacts, so give `active_billions`
    for one (else it is planned as dense: every parameter touched, an underestimate of its speed)."""
    billions = facts.parameters / 1e9
    if billions <= 0:
        raise ValueError(f"{facts.path or facts.name}: no parameters counted in the file")
    bytes_per_weight = facts.tensor_bytes / facts.parameters
    return ModelCandidate(
        key=key or (facts.name or facts.architecture).lower().replace(" ", "-"), name=facts.name or facts.path,
        layers=facts.layers, kv_heads=facts.kv_heads, head_dim=facts.head_dim, hidden_size=facts.embedding_length,
        active_billions=active_billions if active_billions else billions, total_billions=billions,
        bytes_per_weight=bytes_per_weight, quant=f"file type {facts.file_type}",
        source=f"GGUF metadata of {facts.path or facts.name} (fleet/gguf.py)"
        + ("" if active_billions else "; planned as dense (no --active-billions given)"),
        weights_source=f"the file's tensors: {facts.tensor_bytes / GB:.2f} GB over {billions:.2f}B parameters")


@dataclass(frozen=True)
class Rig:
    name: str
    cards: int
    gpu: str = "GTX 1070"
    link_gbs: float = 0.2  # each card's PCIe link, one direction, after packet overhead
    link: str = "PCIe Gen1 x1 riser"


def rigs_of(count: int, cards: int, *, gpu: str = "GTX 1070", link_gbs: float = 0.2,
            link: str = "PCIe Gen1 x1 riser") -> list[Rig]:
    return [Rig(f"rig-{number}", cards, gpu, link_gbs, link) for number in range(1, count + 1)]


# Rates per model class on Pascal (labelled; RigAssumptions turns them into a cost model).
DENSE_ROOFLINE_FRACTION = 0.79
DENSE_ROOFLINE_SOURCE = "docs/research/rig-baseline.md: the seed's 27B at 12.5 tok/s against a 15.8 tok/s ceiling"
MOE_ROOFLINE_FRACTION = 0.39
MOE_ROOFLINE_SOURCE = ("Qwen3-30B-A3B Q4_K_M decodes at ~196 tok/s on an RTX 4090 (runaihome.com, 'Qwen3-30B-A3B "
                       "Local AI Guide'), 0.39 of its 1,008 GB/s over ~2.0 GB read a token; RTX 3090 Ti: 167 tok/s "
                       "(smeltcore.com recipe), 0.33: routing and small expert matmuls, not bandwidth, bind")
MOE_PREFILL_EFFICIENCY = 0.5
OVERHEAD_GB_PER_CARD = 0.5
RATE_MEASUREMENT = ("llama-bench -m MODEL.gguf -ngl 99 -p 512 -n 128 on one card (pp512 and tg128), then on the "
                    "worker's cards (-sm layer); then bench's prompt-size and concurrency sweeps and "
                    "calibrate_worker --worker NAME")


def rig_assumptions(model: ModelCandidate, *, rigs: Sequence[Rig], cards_per_worker: int,
                    cache_type: str) -> RigAssumptions:
    """The stated assumptions for one worker of `model` on `cards_per_worker` of the rigs' cards."""
    link_gbs = min(rig.link_gbs for rig in rigs)
    return RigAssumptions(
        gpu=rigs[0].gpu, gpus=cards_per_worker, weight_gb=model.active_gb, model_billions=model.active_billions,
        total_weight_gb=model.total_gb if model.moe else None,
        kv_bytes_per_token_f16=model.kv_bytes_per_token("f16"),
        roofline_fraction=MOE_ROOFLINE_FRACTION if model.moe else DENSE_ROOFLINE_FRACTION,
        compute_buffer_gb_per_gpu=OVERHEAD_GB_PER_CARD, cache_type=cache_type, slot_copy_gbs=link_gbs,
        prefill_efficiency=MOE_PREFILL_EFFICIENCY if model.moe else 1.0,
        hop_bytes_per_token=model.hidden_size * 4.0, link_gbs=link_gbs,
        weights_source=f"{model.active_billions:g}B parameters a token touches x {model.bytes_per_weight:.3g} bytes "
                       f"({model.weights_source}); {model.source}",
        kv_source=f"2 x {model.layers} layers x {model.kv_heads} KV heads x {model.head_dim} x 2 bytes ({model.source})",
        roofline_source=MOE_ROOFLINE_SOURCE if model.moe else DENSE_ROOFLINE_SOURCE,
    )


def rate_assumptions(models: Iterable[ModelCandidate], rigs: Sequence[Rig]) -> list[dict[str, Any]]:
    """Per model: its decode and prompt rates on one worker of its smallest placement, and every
    assumption they rest on (assumptions.py's list), for the doc and the page."""
    out = []
    for model in models:
        cards = smallest_placement(model, rigs) or 1
        cost, assumptions, _ = assumed_cost(rig_assumptions(model, rigs=rigs, cards_per_worker=cards,
                                                            cache_type="q8_0"))
        out.append({"model": model.key, "cards": cards, "decode_tok_s": 1 / cost.decode_s_per_token,
                    "prefill_tok_s": 1 / cost.prefill_s_per_token,
                    "assumptions": [a.as_dict() for a in assumptions]})
    return out


def card_memory_gb(rigs: Sequence[Rig]) -> float:
    return min(gpu_spec(rig.gpu).memory_gb for rig in rigs)


def placement_fits(model: ModelCandidate, rigs: Sequence[Rig], cards_per_worker: int) -> bool:
    """Whether `cards_per_worker` cards hold the model's total weights and their compute buffers."""
    return model.total_gb + OVERHEAD_GB_PER_CARD * cards_per_worker <= card_memory_gb(rigs) * cards_per_worker


def placements(rigs: Sequence[Rig]) -> list[int]:
    """Cards per worker that divide every rig's cards (a worker never spans two rigs)."""
    smallest = min(rig.cards for rig in rigs)
    return [cards for cards in range(1, smallest + 1) if all(rig.cards % cards == 0 for rig in rigs)]


def smallest_placement(model: ModelCandidate, rigs: Sequence[Rig]) -> int | None:
    return next((cards for cards in placements(rigs) if placement_fits(model, rigs, cards)), None)


def largest_context(model: ModelCandidate, rigs: Sequence[Rig], *, cards_per_worker: int, slots: int,
                    cache_type: str) -> int:
    """The largest context per slot (a multiple of CONTEXT_STEP, at most MAX_CONTEXT) whose KV cache
    fits the worker's cards beside the total weights and the buffers; 0 when none does."""
    free = card_memory_gb(rigs) * cards_per_worker - model.total_gb - OVERHEAD_GB_PER_CARD * cards_per_worker
    if free <= 0:
        return 0
    tokens = free * GB / (slots * model.kv_bytes_per_token(cache_type))
    return int(min(MAX_CONTEXT, math.floor(tokens / CONTEXT_STEP) * CONTEXT_STEP))


@dataclass(frozen=True)
class Configuration:
    model: ModelCandidate
    cards_per_worker: int
    workers: int
    slots: int
    context_tokens: int
    cache_type: str
    shared_prefix_k: int

    def memory_gb(self) -> float:
        """GB one worker needs: total weights + every slot's KV + a buffer per card."""
        kv = self.slots * self.context_tokens * self.model.kv_bytes_per_token(self.cache_type) / GB
        return self.model.total_gb + kv + OVERHEAD_GB_PER_CARD * self.cards_per_worker

    def label(self) -> str:
        return (f"{self.model.key}: {self.workers} x {self.cards_per_worker} cards, {self.slots} x "
                f"{self.context_tokens // 1024}k, KV {self.cache_type}, prefix "
                + (f"k={self.shared_prefix_k}" if self.shared_prefix_k else "off"))


@dataclass(frozen=True)
class Rejected:
    model: str
    what: str
    reason: str


def configurations(models: Sequence[ModelCandidate], rigs: Sequence[Rig], *, min_context: int,
                   slot_choices: Sequence[int] = SLOT_CHOICES, cache_types: Sequence[str] = CACHE_TYPES,
                   prefix_choices: Sequence[int] = (0, SHARED_PREFIX_K), placements_tried: int = 2
                   ) -> tuple[list[Configuration], list[Rejected]]:
    """Every configuration that fits the cards' memory and gives each slot at least `min_context`,
    and what was left out and why (placements that do not hold the weights, slots too short)."""
    kept: list[Configuration] = []
    rejected: list[Rejected] = []
    memory = card_memory_gb(rigs)
    for model in models:
        fitting = 0
        for cards in placements(rigs):
            if not placement_fits(model, rigs, cards):
                rejected.append(Rejected(model.key, f"{cards} card(s) per worker",
                                         f"{model.total_gb:.1f} GB of weights + {OVERHEAD_GB_PER_CARD:g} GB a card "
                                         f"do not fit {cards} x {memory:g} GB"))
                continue
            fitting += 1
            if fitting > placements_tried:
                rejected.append(Rejected(model.key, f"{cards} card(s) per worker",
                                         f"not tried: {placements_tried} smaller placements already hold it"))
                continue
            workers = sum(rig.cards // cards for rig in rigs)
            for slots in slot_choices:
                for cache_type in cache_types:
                    context = largest_context(model, rigs, cards_per_worker=cards, slots=slots, cache_type=cache_type)
                    if context < min_context:
                        rejected.append(Rejected(model.key, f"{cards} card(s), {slots} slots, KV {cache_type}",
                                                 f"{context:,} tokens a slot fit, under the {min_context:,} needed"))
                        continue
                    for k in prefix_choices:
                        kept.append(Configuration(model, cards, workers, slots, context, cache_type, k))
                    if context >= MAX_CONTEXT:
                        break  # a lower-quality KV type buys no more context
    return kept, rejected


@dataclass(frozen=True)
class Targets:
    agent_p95_s: float = 60.0
    chat_p95_s: float = 15.0


@dataclass
class SearchRow:
    configuration: Configuration
    sizes: list[dict[str, Any]] = field(default_factory=list)  # per size simulated: students, p95s, refused
    served: int = 0

    def key(self) -> tuple[float, ...]:
        at = next((s for s in self.sizes if s["students"] == self.served), self.sizes[0] if self.sizes else None)
        p95 = at["agents_p95_s"] if at and at["agents_p95_s"] is not None else math.inf
        config = self.configuration
        return (-self.served, p95, CACHE_TYPES.index(config.cache_type), -config.model.total_billions,
                config.shared_prefix_k)

    def as_dict(self) -> dict[str, Any]:
        config = self.configuration
        return {"label": config.label(), "model": config.model.key, "model_name": config.model.name,
                "cards_per_worker": config.cards_per_worker, "workers": config.workers, "slots": config.slots,
                "context": config.context_tokens, "cache_type": config.cache_type,
                "shared_prefix_k": config.shared_prefix_k, "memory_gb": round(config.memory_gb(), 2),
                "served": self.served, "sizes": self.sizes}


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


def _p95_refused(completed: int, refused: int) -> bool:
    """Whether a p95 over `completed` finite turns and `refused` infinite ones is infinite (the rank
    plan.agent_ttft_p95_s interpolates at reaches a refused turn)."""
    total = completed + refused
    if not refused or not total:
        return False
    rank = (total - 1) * 0.95
    low = math.floor(rank)
    return low >= completed or (min(low + 1, total - 1) >= completed and rank > low)


def size_result(report: dict[str, Any], students: int, targets: Targets) -> dict[str, Any]:
    """One simulated class size: the agents' p95 (refused = infinite), chat's p95 (a refused chat
    turn makes it infinite), and whether both targets are met."""
    agents = report["agents"]["ttft_p95_s_refused_as_infinite"]
    chat_report = report["per_persona"].get("chat") or {}
    chat = p95_s(report, "chat") if chat_report else None
    if chat_report and _p95_refused(int(chat_report.get("completed") or 0), int(chat_report.get("refused") or 0)):
        chat = math.inf
    met = (agents is not None and agents <= targets.agent_p95_s
           and (chat is None or chat <= targets.chat_p95_s))
    return {"students": students, "agents_p95_s": agents, "chat_p95_s": chat,
            "agents_refused": report["agents"]["refused"], "cache_hit_rate": report.get("cache_hit_rate"),
            "met": met}


def configuration_cost(config: Configuration, rigs: Sequence[Rig],
                       measured: dict[str, CostModel] | None = None) -> CostModel:
    """The worker's cost model: a measured calibration's for the model where given (`measured`,
    by model key: after a rig day), else one from the labelled assumptions."""
    if measured and config.model.key in measured:
        return measured[config.model.key]
    cost, _, _ = assumed_cost(rig_assumptions(config.model, rigs=rigs, cards_per_worker=config.cards_per_worker,
                                              cache_type=config.cache_type))
    return cost


def simulate_size(config: Configuration, rigs: Sequence[Rig], *, mix: dict[str, int], students: int,
                  fleet: FleetPlan, seed: int, scale: float, targets: Targets,
                  measured: dict[str, CostModel] | None = None) -> dict[str, Any]:
    plan = ClassPlan(mix=scaled_mix(mix, students), seed=seed, scale=scale, replicates=1,
                     fleet=replace(fleet, workers=config.workers, slots=config.slots,
                                   context_tokens=config.context_tokens, cache_type=config.cache_type,
                                   shared_prefix_k=config.shared_prefix_k,
                                   slot_files=fleet.slot_files or config.shared_prefix_k > 0,
                                   model_id=config.model.key))
    return size_result(predict(plan, configuration_cost(config, rigs, measured)), students, targets)


def search(*, models: Sequence[ModelCandidate], rigs: Sequence[Rig], mix: dict[str, int], sizes: Sequence[int],
           fleet: FleetPlan, targets: Targets = Targets(), seed: int = 1, scale: float = 1.0,
           slot_choices: Sequence[int] = SLOT_CHOICES, cache_types: Sequence[str] = CACHE_TYPES,
           prefix_choices: Sequence[int] = (0, SHARED_PREFIX_K), placements_tried: int = 2,
           measured: dict[str, CostModel] | None = None,
           progress: Callable[[SearchRow], None] | None = None) -> dict[str, Any]:
    """The ranked configurations for `mix` at `sizes` within `targets` (module docstring); `fleet`
    carries the gateway's settings and the simulated duration. Also: what was left out, the
    smallest context used and why, and per model the curve of its best configuration at every size.
    `measured` (model key: a calibration's cost model) replaces a model's assumed speeds at every
    placement; its memory check stays the model's own."""
    if not any(name in AGENT_PERSONAS for name in mix):
        raise ValueError("the mix has no agent persona: the search ranks by the agents' p95")
    ordered = sorted(set(sizes))
    minimum = minimum_context(mix)
    configs, rejected = configurations(models, rigs, min_context=minimum.tokens, slot_choices=slot_choices,
                                       cache_types=cache_types, prefix_choices=prefix_choices,
                                       placements_tried=placements_tried)
    rows: list[SearchRow] = []
    for config in configs:
        row = SearchRow(config)
        for students in ordered:
            result = simulate_size(config, rigs, mix=mix, students=students, fleet=fleet, seed=seed, scale=scale,
                                   targets=targets, measured=measured)
            row.sizes.append(result)
            if not result["met"]:
                break
            row.served = students
        rows.append(row)
        if progress:
            progress(row)
    rows.sort(key=SearchRow.key)
    curves = []
    for model in models:
        best = next((row for row in rows if row.configuration.model.key == model.key), None)
        if best is None:
            continue
        done = {s["students"]: s for s in best.sizes}
        points = [done.get(n) or simulate_size(best.configuration, rigs, mix=mix, students=n, fleet=fleet, seed=seed,
                                               scale=scale, targets=targets, measured=measured) for n in ordered]
        curves.append({"model": model.key, "label": best.configuration.label(), "sizes": points})
    return {"rows": [row.as_dict() for row in rows], "rejected": [asdict(r) for r in rejected],
            "curves": curves, "min_context": asdict(minimum), "targets": asdict(targets),
            "sizes": ordered, "mix": mix, "duration_s": fleet.duration_s, "seed": seed, "scale": scale,
            "models": [m.as_dict() for m in models], "rigs": [asdict(r) for r in rigs],
            "rates": rate_assumptions(models, rigs), "measured": sorted(measured or {}),
            "search_assumptions": [a.as_dict() for a in search_assumptions(rigs)]}


def search_assumptions(rigs: Sequence[Rig]) -> list[Assumption]:
    """What the search itself assumes beyond each worker's cost model."""
    return [
        Assumption("weights per parameter (Q4_K_M)", Q4_K_M_BYTES_PER_WEIGHT, "bytes", Q4_K_M_SOURCE,
                   "the served GGUF's size (plan_rigs --gguf PATH reads it)"),
        Assumption("memory held per card besides weights and KV", OVERHEAD_GB_PER_CARD, "GB",
                   "assumption (CUDA context and llama.cpp's compute buffers; docs/research/rig-forecast.md)",
                   "the worker's startup log and nvidia-smi after loading"),
        Assumption("decode roofline fraction, dense", DENSE_ROOFLINE_FRACTION, "", DENSE_ROOFLINE_SOURCE,
                   RATE_MEASUREMENT),
        Assumption("decode roofline fraction, mixture of experts", MOE_ROOFLINE_FRACTION, "", MOE_ROOFLINE_SOURCE,
                   RATE_MEASUREMENT),
        Assumption("prompt rate of a mixture of experts against a dense model of its active parameters",
                   MOE_PREFILL_EFFICIENCY, "",
                   "assumption, no public Pascal figure found: a 512-token batch spreads over 128 experts, so each "
                   "expert's matmul is ~32 tokens wide and llama.cpp's quantized kernels run it less efficiently",
                   RATE_MEASUREMENT),
        Assumption("activations a prompt token sends across a card boundary", 4.0, "bytes x hidden size",
                   "llama.cpp passes f32 activations between the cards of a layer split (~20 KB a token for a "
                   "5,120-wide model, docs/hardware.md)",
                   "llama-bench -p 512 on 1, 2 and 4 cards of a worker (-sm layer)"),
        Assumption("PCIe link per card", min(rig.link_gbs for rig in rigs), "GB/s",
                   f"{rigs[0].link}: 250 MB/s a direction, ~80 % after packet overhead (docs/hardware.md)",
                   "nvidia-smi --query-gpu=pcie.link.gen.current,pcie.link.width.current under load; "
                   "calibrate_worker --slot-files"),
        Assumption("largest context per slot", MAX_CONTEXT, "tokens",
                   "Qwen3's model cards: 32,768 trained, YaRN x4 to 131,072 (llama-server --rope-scaling yarn)",
                   "-"),
        Assumption("model quality", 0, "",
                   "not weighed: the search ranks by students served; the school weighs a smaller model's answers",
                   "the school's own trial of each model on its exercises"),
    ]
