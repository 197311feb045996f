"""`manage.py roofline`: the single-stream decode ceiling of a GGUF on a GPU, and how far a
measured rate is from it.

    manage.py roofline --gguf /models/model-q4_k_m.gguf --gpu "GTX 1070" --gpus 7 --measured 12.5
    manage.py roofline --weights-gb 16.2 --bandwidth-gbs 256 --measured 12.5
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.roofline import GB, GPU_SPECS, SPLIT_MODES, gpu_spec, read_gguf, roofline


class Command(BaseCommand):
    help = "Bandwidth-bound single-stream decode ceiling (tokens/s) and a measured rate as a % of it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--gguf", help="Model file: weights and shape come from it.")
        parser.add_argument("--weights-gb", type=float, help="Or: GB of weights read per token.")
        parser.add_argument("--gpu", help=f"A card from the table: {', '.join(GPU_SPECS)}.")
        parser.add_argument("--bandwidth-gbs", type=float, help="Or: memory bandwidth in GB/s (CPU RAM too).")
        parser.add_argument("--gpus", type=int, default=1)
        parser.add_argument("--split-mode", default="layer", choices=SPLIT_MODES)
        parser.add_argument("--context", type=int, default=0, help="Tokens already in context (KV reads).")
        parser.add_argument("--measured", type=float, help="A measured generation rate, tokens/s.")

    def handle(self, *args: Any, **options: Any) -> None:
        kv_per_token = 0.0
        if options["gguf"]:
            try:
                facts = read_gguf(options["gguf"])
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot read {options['gguf']}: {exc}") from None
            weights = float(facts.weight_bytes_per_token)
            kv_per_token = facts.kv_bytes_per_token()
            self.stdout.write(f"{facts.name}: {facts.parameters / 1e9:.2f} B parameters, {facts.tensor_bytes / GB:.2f} GB "
                              f"of tensors, {weights / GB:.2f} GB read per token, KV {kv_per_token / 1024:.0f} KiB "
                              f"per token (f16)")
        elif options["weights_gb"]:
            weights = options["weights_gb"] * GB
        else:
            raise CommandError("give --gguf or --weights-gb")
        if options["gpu"]:
            try:
                bandwidth = gpu_spec(options["gpu"]).bandwidth_gbs
            except KeyError as exc:
                raise CommandError(str(exc.args[0])) from None
        elif options["bandwidth_gbs"]:
            bandwidth = options["bandwidth_gbs"]
        else:
            raise CommandError("give --gpu or --bandwidth-gbs")
        try:
            line = roofline(weight_bytes=weights, bandwidth_gbs=bandwidth, gpus=options["gpus"],
                            split_mode=options["split_mode"], kv_bytes_per_token_read=kv_per_token,
                            context_tokens=options["context"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"ceiling: {line.ceiling_tok_s:.1f} tokens/s ({line.bytes_per_token / GB:.2f} GB per token "
                          f"at {line.bandwidth_gbs:g} GB/s, {options['gpus']} GPU(s), split {options['split_mode']})")
        if options["measured"]:
            self.stdout.write(f"measured {options['measured']:g} tokens/s = {line.percent(options['measured']):.0f}% "
                              f"of the ceiling")
