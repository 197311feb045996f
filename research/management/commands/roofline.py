"""`manage.py roofline`: the single-stream decode ceiling of a model on GPUs, and how far a
measured rate is from it.

    manage.py roofline --worker rig1-a --measured 12.5          # facts the rig agent reported
    manage.py roofline --gguf /models/model-q4_k_m.gguf --gpu "GTX 1070" --gpus 7 --measured 12.5
    manage.py roofline --weights-gb 16.2 --bandwidth-gbs 256 --gpus 2 --split-mode row --tensor-split 3,1
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Worker
from research.bench_levels import model_facts, worker_bandwidths_gbs
from research.roofline import GB, GPU_SPECS, SPLIT_MODES, gpu_spec, read_gguf, split_roofline


def _shares(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--tensor-split {text!r}: expected proportions like 3,1") from None


class Command(BaseCommand):
    help = "Bandwidth-bound single-stream decode ceiling (tokens/s) and a measured rate as a % of it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--worker", help="A registered worker: model facts, GPUs, split and shares from its "
                                             "rig agent's report (no model file needed here).")
        parser.add_argument("--gguf", help="Or a model file: weights and shape come from it.")
        parser.add_argument("--weights-gb", type=float, help="Or: GB of weights read per token.")
        parser.add_argument("--gpu", help=f"A card from the table: {', '.join(GPU_SPECS)}.")
        parser.add_argument("--bandwidth-gbs", type=float, help="Or: memory bandwidth in GB/s (CPU RAM too).")
        parser.add_argument("--gpus", type=int, default=None, help="GPUs (default 1, or the worker's).")
        parser.add_argument("--split-mode", default=None, choices=SPLIT_MODES, help="Default layer, or the worker's.")
        parser.add_argument("--tensor-split", default=None, help="Shares per GPU, e.g. 3,1 (default equal).")
        parser.add_argument("--context", type=int, default=0, help="Tokens already in context (KV reads).")
        parser.add_argument("--measured", type=float, help="A measured generation rate, tokens/s.")

    def handle(self, *args: Any, **options: Any) -> None:
        kv_per_token = 0.0
        facts = None
        launch: dict[str, Any] = {}
        bandwidths: list[float] = []
        if options["worker"]:
            worker = Worker.objects.filter(name=options["worker"]).first()
            if worker is None:
                raise CommandError(f"no worker named {options['worker']!r}")
            launch = worker.launch or {}
            facts, _source = model_facts(launch)
            if facts is None:
                raise CommandError(f"worker {worker.name}: its rig agent reported no GGUF facts and its model file "
                                   "is not here; give --gguf or --weights-gb")
            bandwidths = worker_bandwidths_gbs(worker)
        elif options["gguf"]:
            try:
                facts = read_gguf(options["gguf"])
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot read {options['gguf']}: {exc}") from None
        if facts is not None:
            weights = float(facts.weight_bytes_per_token)
            kv_per_token = facts.kv_bytes_per_token()
            self.stdout.write(f"{facts.name}: {facts.parameters / 1e9:.2f} B parameters, {facts.tensor_bytes / GB:.2f} GB "
                              f"of tensors, {weights / GB:.2f} GB read per token, KV {kv_per_token / 1024:.0f} KiB "
                              f"per token (f16)")
        elif options["weights_gb"]:
            weights = options["weights_gb"] * GB
        else:
            raise CommandError("give --worker, --gguf or --weights-gb")
        gpus = options["gpus"] or len(bandwidths) or 1
        if options["gpu"]:
            try:
                bandwidths = [gpu_spec(options["gpu"]).bandwidth_gbs] * gpus
            except KeyError as exc:
                raise CommandError(str(exc.args[0])) from None
        elif options["bandwidth_gbs"]:
            bandwidths = [options["bandwidth_gbs"]] * gpus
        elif not bandwidths:
            raise CommandError("give --gpu or --bandwidth-gbs" + (" (the worker's GPUs are not in the table)"
                                                                  if options["worker"] else ""))
        split = options["split_mode"] or str(launch.get("split_mode") or "layer")
        shares = _shares(options["tensor_split"]) or [float(x) for x in launch.get("tensor_split") or []]
        try:
            line = split_roofline(weight_bytes=weights, bandwidths_gbs=bandwidths, split_mode=split, shares=shares,
                                  kv_bytes_per_token_read=kv_per_token, context_tokens=options["context"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        shown = f", shares {' / '.join(f'{s:.2f}' for s in line.shares)}" if shares else ""
        self.stdout.write(f"ceiling: {line.ceiling_tok_s:.1f} tokens/s ({line.bytes_per_token / GB:.2f} GB per token "
                          f"at {line.bandwidth_gbs:g} GB/s, {len(bandwidths)} GPU(s), split {split}{shown})")
        if options["measured"]:
            self.stdout.write(f"measured {options['measured']:g} tokens/s = {line.percent(options['measured']):.0f}% "
                              f"of the ceiling")
