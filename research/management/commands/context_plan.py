"""`manage.py context_plan`: how much context per slot fits beside the weights, and what 256k
would need, per configuration (research/context_plan.py has the sums).

    manage.py context_plan --gguf /models/MODEL.gguf --gpus 7 --vram-gb 8 --slots 1,4 --cache-type f16,q8_0,q4_0
    manage.py context_plan --worker rig1-a          # facts, GPUs, VRAM and slots from the rig agent's report
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.gguf import KV_BYTES_PER_ELEMENT, GgufFacts, read_gguf
from fleet.models import Worker
from research.context_plan import DEFAULT_RESERVE_MIB, GIB, context_plan, describe
from research.selectors import worker_plan_inputs

CACHE_TYPES = ("f16", "q8_0", "q4_0")


def _ints(flag: str, text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"{flag} {text!r}: expected whole numbers like 1,4") from None
    if not values or any(v < 1 for v in values):
        raise CommandError(f"{flag} {text!r}: each must be at least 1")
    return values


def _cache_types(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in KV_BYTES_PER_ELEMENT]
    if not names or unknown:
        raise CommandError(f"--cache-type {text!r}: choose from {', '.join(CACHE_TYPES)}")
    return names


class Command(BaseCommand):
    help = ("Per configuration: KV memory per slot per 1,000 tokens, the largest context per slot that fits beside "
            "the weights, and what 256k would need.")

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--worker", help="A registered worker: the GGUF facts its rig agent reported "
                                             "(defaults for --gpus, --vram-gb and --slots from it too).")
        source.add_argument("--gguf", help="A model file.")
        parser.add_argument("--gpus", default=None, help="GPUs the worker spans; a list compares: 4,7.")
        parser.add_argument("--vram-gb", type=float, default=None,
                            help="Memory per GPU in GiB (a GTX 1070: 8); default the worker's GPUs' own.")
        parser.add_argument("--slots", default=None, help="llama-server -np; a list compares: 1,4,8.")
        parser.add_argument("--cache-type", default=",".join(CACHE_TYPES),
                            help="KV cache types: f16, q8_0, q4_0; a list compares (default all three).")
        parser.add_argument("--reserve-mib", type=float, default=DEFAULT_RESERVE_MIB,
                            help="Per GPU, lost before any KV (CUDA context, compute buffers): an estimate.")
        parser.add_argument("--json", default=None, help="Also write the plans to this file.")

    def handle(self, *args: Any, **options: Any) -> None:
        facts, gpus, vram_gib, slots = self._facts_and_defaults(options)
        self.stdout.write(f"{facts.name}: {facts.layers} layers, {facts.kv_heads} KV heads x {facts.head_dim} dims, "
                          f"{facts.tensor_bytes / GIB:.2f} GiB of weights, trained context {facts.context_length:,}")
        plans = []
        for gpu_count, slot_count, cache in itertools.product(gpus, slots, _cache_types(options["cache_type"])):
            try:
                plan = context_plan(facts, gpus=gpu_count, vram_gib=vram_gib, slots=slot_count, cache_type=cache,
                                    reserve_mib=options["reserve_mib"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            plans.append(plan)
            self.stdout.write(describe(plan))
        if options["json"]:
            Path(options["json"]).write_text(json.dumps([p.as_dict() for p in plans], indent=2) + "\n")
            self.stdout.write(f"wrote {options['json']}")

    def _facts_and_defaults(self, options: dict[str, Any]) -> tuple[GgufFacts, list[int], float, list[int]]:
        gpus = _ints("--gpus", options["gpus"]) if options["gpus"] else None
        slots = _ints("--slots", options["slots"]) if options["slots"] else None
        vram = options["vram_gb"]
        if options["gguf"]:
            try:
                facts = read_gguf(options["gguf"])
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot read {options['gguf']}: {exc}") from None
        else:
            worker = Worker.objects.filter(name=options["worker"]).first()
            if worker is None:
                raise CommandError(f"no worker named {options['worker']!r}")
            found, worker_gpus, worker_vram = worker_plan_inputs(worker)
            if found is None:
                raise CommandError(f"worker {worker.name}: its rig agent reported no GGUF facts and its model file "
                                   "is not here; give --gguf")
            facts = found
            gpus = gpus or ([worker_gpus] if worker_gpus else None)
            slots = slots or [worker.slots]
            vram = vram if vram is not None else worker_vram
        if vram is None:
            raise CommandError("give --vram-gb (memory per GPU, GiB)")
        return facts, gpus or [1], vram, slots or [1]
