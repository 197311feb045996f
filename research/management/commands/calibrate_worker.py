"""`manage.py calibrate_worker`: a cost model for the capacity planner, stored as a Calibration.

    manage.py calibrate_worker --worker cpu-1                 # fitted to that worker's stored runs
    manage.py calibrate_worker --worker cpu-1 --count-tokens  # ... and its token counts (worker up)
    manage.py calibrate_worker --runs 12,13,14,15             # fitted to these runs (one worker)
    manage.py calibrate_worker --assumptions --gpus 8         # from stated assumptions (the rigs)
    manage.py calibrate_worker --worker demo-worker-1 --loaded-label loaded --loaded-workers 2
        # workers that share a host's compute (the CPU demo): runs whose label holds "loaded" were
        # benched while both workers were benched at once; the rest, alone. The cost model is fitted
        # to the runs alone; how much slower the loaded ones were is its contention.

`--count-tokens` asks the worker (or `--tokens-url`, a llama-server of the same model) to count
the class personas' prompt segments with its tokenizer and chat template (no generation), and
stores the characters per token it finds with the calibration (research/planner/tokens.py);
without it the planner counts 4 characters a token. The texts are the personas' at `--token-scale`
(default 0.1): give the scale you will plan at, as shorter texts tokenize denser.

`--slot-files` times the worker's slot file saves and restores (a handover's two tasks, run in
llama-server's loop between two steps; inference/admission/slot_files.py): a few prompts of 120-1,200 words
evaluated in slot 0, each saved and restored three times, timed by llama-server itself; stored as
seconds per token of a save and of a restore. Run it with the worker up, serving no students.

Prints the cost model, the fit's residuals (or the assumptions and their sources), and as its
last line `calibration N`, the stored calibration's id for `plan_class --calibration N`.
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.models import BenchmarkRun, Calibration
from research.planner.assumptions import RigAssumptions
from research.planner.cost import CostModel
from research.planner.tokens import SAMPLE_SCALE
from research.planner_services import (
    CalibrationRefused,
    calibration_assume,
    calibration_fit,
    count_tokens,
    measure_slot_files,
    runs_of_worker,
)


def parse_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--runs {text!r}: expected run ids separated by commas") from None
    if not ids:
        raise ValueError("--runs names no run")
    return ids


def weight_sizes(*, model_gb: float | None, active_gb: float | None, total_gb: float | None,
                 default_gb: float = RigAssumptions().weight_gb) -> tuple[float, float | None]:
    """(GB a token reads, GB the cards hold or None for the same) from the flags: `--model-gb` alone
    is both (a dense model, as before the split); `--active-gb` and `--total-gb` override it each."""
    active = active_gb if active_gb is not None else model_gb if model_gb is not None else default_gb
    total = total_gb if total_gb is not None else model_gb
    if active <= 0 or (total is not None and total <= 0):
        raise ValueError("--model-gb, --active-gb and --total-gb are > 0")
    if total is not None and total < active:
        raise ValueError(f"--total-gb {total:g} is below the {active:g} GB a token reads: the cards hold at least "
                         f"what a token reads")
    return active, total


def cost_lines(cost: CostModel) -> list[str]:
    tokens = cost.tokens
    counted = ("  tokens             4 characters a token, 4 a message (not measured)" if tokens is None else
               "  tokens             characters per token "
               + ", ".join(f"{kind} {value:.2f}" for kind, value in sorted(tokens.chars_per_token.items()))
               + f"; {tokens.tokens_per_message:g} per message; {tokens.head_tokens:g} once per prompt "
               f"({tokens.head_tokens_no_system:g} without a system message); the template "
               + ("renders" if tokens.renders_tool_calls else "drops") + " tool calls")
    return [
        f"  prompt evaluation  {cost.prefill_s_per_token * 1000:.3f} ms per uncached token "
        f"({1 / cost.prefill_s_per_token if cost.prefill_s_per_token else float('inf'):.1f} tok/s), "
        f"+{cost.prefill_s_per_context_token * 1e6:.3f} us per token already before it in the slot",
        (f"  small chunks       +{cost.small_chunk_s_per_context_token * 1e6:.3f} us per token cached before it, "
         f"for each of a chunk's first {cost.small_chunk_tokens} tokens" if cost.small_chunk_tokens else
         "  small chunks       none fitted (no slower pairs in chunks of a few dozen tokens)"),
        f"  request overhead   {cost.request_overhead_s * 1000:.1f} ms before the first prompt token",
        f"  decode             {cost.decode_s_per_token * 1000:.2f} ms per token for one slot "
        f"({1 / cost.decode_s_per_token:.1f} tok/s), +{cost.decode_s_per_extra_slot * 1000:.2f} ms per extra slot "
        f"in the batch, +{cost.decode_s_per_context_token * 1e6:.3f} us per token of context",
        f"  batch              {cost.batch_tokens} tokens, run as passes of at most {cost.ubatch_tokens}; "
        f"+{cost.pass_s * 1000:.2f} ms for each pass of a step after its first; KV cache {cost.cache_type}",
        f"  contention         +{cost.contention:.1%} a step for each other worker computing at the same time",
        f"  jitter             {cost.jitter:.1%} (relative SD of a step's time, from identical requests)",
        (f"  slot files         save {cost.slot_save_s_per_token * 1e6:.2f} us, restore "
         f"{cost.slot_restore_s_per_token * 1e6:.2f} us per token of the file, in the loop between two steps"
         if cost.slot_save_s_per_token or cost.slot_restore_s_per_token else
         "  slot files         not measured: a handover's save and restore planned as free"),
        f"  under a class      x{cost.load_factor:.3f} every step and the request overhead "
        + ("(the benches' speed)" if cost.load_factor == 1 else "(the worker's speed under a class, measured apart)"),
        counted,
    ]


def residual_lines(residuals: dict[str, Any]) -> list[str]:
    def one(name: str, what: str) -> str:
        row = residuals.get(name) or {}
        if not row.get("n"):
            return f"  {what}: no requests"
        rel = row.get("max_relative")
        return (f"  {what}: {row['n']} points, RMS {row['rms_s'] * 1000:.1f} ms, worst {row['max_abs_s'] * 1000:.1f} ms"
                + ("" if rel is None else f" ({rel:.0%})"))

    lines = [one("ttft", "TTFT at concurrency 1"), one("ttft_uncached", "  of which uncached"),
             one("ttft_cached", "  of which cached")]
    for row in residuals.get("ttft_by_run") or []:
        lines.append(f"    run {row['run']}: {row['uncached']:.0f} uncached after {row['cached']:.0f} cached, TTFT "
                     f"{row['observed_s'] * 1000:.0f} ms measured, {row['predicted_s'] * 1000:.0f} ms fitted")
    lines.append(one("tpot", "decode step by run (TPOT at batch 1, median chunk gap above)"))
    for row in residuals.get("tpot_by_run") or []:
        context = f", {row['context']:.0f} tokens of context a slot" if row.get("context") is not None else ""
        lines.append(f"    run {row['run']}: batch {row['batch']}{context}, {row['observed_s'] * 1000:.1f} ms "
                     f"measured, {row['predicted_s'] * 1000:.1f} ms fitted")
    shared = residuals.get("contention")
    if shared:
        parts = [f"{name} {shared[key]:.3f}" for name, key in (("TTFT", "ttft_ratio"), ("decode step", "decode_ratio"))
                 if shared.get(key) is not None]
        lines.append(f"contention: runs {', '.join(map(str, shared['runs']))} beside {shared['others']} other "
                     f"worker(s), measured / fitted alone: median {shared['ratio']:.3f} ({', '.join(parts)}; "
                     f"{shared['ttft_points']} requests, {shared['decode_runs']} runs)")
    basis = residuals.get("tokens")
    if basis:
        at = f" at scale {basis['scale']:g}" if basis.get("scale") is not None else ""
        lines.append(f"token counts (the worker's tokenizer and template, over the personas' segments{at}):")
        for kind, segments in sorted(basis.get("segments", {}).items()):
            lines.append(f"    {kind}: {segments} segments, {basis['characters'][kind]} characters, "
                         f"{basis['tokens'][kind]} tokens")
    files = residuals.get("slot_files")
    if files:
        lines.append("slot files (timed by llama-server, a line through the origin per kind):")
        for kind in ("save", "restore"):
            row = files[kind]
            worst = "" if row.get("max_relative") is None else f", worst {row['max_relative']:.0%} off the line"
            lines.append(f"    {kind}: {row['n']} tasks of {row['tokens'][0]}-{row['tokens'][1]} tokens, "
                         f"{row['s_per_token'] * 1e6:.2f} us per token{worst}")
    return lines


class Command(BaseCommand):
    help = ("Calibrate the capacity planner's cost model for a worker from its stored benchmark runs (a prompt-size "
            "sweep at concurrency 1, a concurrency sweep), or from stated assumptions; prints `calibration N` last.")

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--worker", help="Fit to every finished run sent straight to this worker.")
        which.add_argument("--runs", help="Fit to these run ids (of one worker), e.g. 12,13,14.")
        which.add_argument("--assumptions", action="store_true",
                           help="Build it from stated assumptions (bandwidth roofline, public Pascal figures).")
        parser.add_argument("--label", default="")
        parser.add_argument("--count-tokens", action="store_true",
                            help="Count the personas' prompt segments with the worker's tokenizer (it must be up).")
        parser.add_argument("--token-scale", type=float, default=SAMPLE_SCALE,
                            help="With --count-tokens: the personas' --scale to sample their texts at; give the "
                                 "scale you will plan at (shorter texts tokenize denser).")
        parser.add_argument("--slot-files", action="store_true",
                            help="Also time the worker's slot file saves and restores (worker up, no students).")
        parser.add_argument("--tokens-url", default=None,
                            help="With --count-tokens: a llama-server of the same model to count with "
                                 "(default: the worker's own address).")
        parser.add_argument("--loaded-label", default=None,
                            help="Runs whose label contains this were benched while the host's other workers were "
                                 "benched at once: they give the contention, the rest the cost model.")
        parser.add_argument("--loaded-workers", type=int, default=2,
                            help="With --loaded-label: how many workers (this one included) were benched at once.")
        parser.add_argument("--load-factor", type=float, default=1.0,
                            help="With --worker or --runs: plan every step and the request overhead at this many "
                                 "times the fitted time (the worker's speed under a class against its benches, "
                                 "measured apart; default 1).")
        group = parser.add_argument_group("assumptions (with --assumptions)")
        defaults = RigAssumptions()
        group.add_argument("--gpu", default=defaults.gpu, help="Card name from research/roofline.py (GTX 1070).")
        group.add_argument("--gpus", type=int, default=defaults.gpus, help="Cards per worker (layer split).")
        group.add_argument("--model-gb", type=float, default=None,
                           help=f"GB of weights, both read per token and held by the cards (a dense model; default "
                                f"{defaults.weight_gb:g}); --active-gb and --total-gb set each apart.")
        group.add_argument("--active-gb", type=float, default=None,
                           help="GB of weights a token reads (a mixture of experts: its active experts' and shared "
                                "weights); scales decode. Default: --model-gb.")
        group.add_argument("--total-gb", type=float, default=None,
                           help="GB of weights the cards must hold (a mixture of experts: every expert); the memory "
                                "check uses it. Default: --model-gb, else --active-gb.")
        group.add_argument("--model-billions", type=float, default=defaults.model_billions,
                           help="Parameters a token touches, in billions (a mixture of experts: its active ones; "
                                "scales the prompt evaluation rate).")
        group.add_argument("--kv-bytes-per-token", type=float, default=defaults.kv_bytes_per_token_f16,
                           help="KV cache bytes per token at f16 (2 x layers x KV heads x head dim x 2).")
        group.add_argument("--roofline-fraction", type=float, default=defaults.roofline_fraction,
                           help="Fraction of the decode roofline reached (0.79 measured on the rig's seed).")
        group.add_argument("--cache-type", default=defaults.cache_type, choices=["f16", "q8_0", "q4_0"])
        group.add_argument("--slot-copy-gbs", type=float, default=defaults.slot_copy_gbs,
                           help="GB/s a slot file's KV cache moves between the cards and the host (a Gen1 x1 "
                                "riser: 0.2); 0 plans a handover's save and restore as free.")
        group.add_argument("--slot-write-gbs", type=float, default=defaults.slot_write_gbs,
                           help="GB/s a saved slot file is written to the host's disk (0: free).")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 0 < options["token_scale"] <= 1:
            raise CommandError("--token-scale must be in (0, 1], as class_replay's and plan_class's --scale")
        if options["assumptions"]:
            if options["slot_files"]:
                raise CommandError("--slot-files times a running worker (--worker or --runs); an assumed calibration "
                                   "states its slot file rates (--slot-copy-gbs, --slot-write-gbs)")
            if options["load_factor"] != 1.0:
                raise CommandError("--load-factor scales a fitted worker's times (--worker or --runs); an assumed "
                                   "calibration states its own")
            try:
                active_gb, total_gb = weight_sizes(model_gb=options["model_gb"], active_gb=options["active_gb"],
                                                   total_gb=options["total_gb"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            if options["gpus"] < 1 or not 0 < options["roofline_fraction"] <= 1:
                raise CommandError("--gpus >= 1 and --roofline-fraction in (0, 1] are needed")
            if options["slot_copy_gbs"] < 0 or options["slot_write_gbs"] < 0:
                raise CommandError("--slot-copy-gbs and --slot-write-gbs are >= 0 (0: free)")
            rig = RigAssumptions(gpu=options["gpu"], gpus=options["gpus"], weight_gb=active_gb, total_weight_gb=total_gb,
                                 model_billions=options["model_billions"],
                                 kv_bytes_per_token_f16=options["kv_bytes_per_token"],
                                 roofline_fraction=options["roofline_fraction"], cache_type=options["cache_type"],
                                 slot_copy_gbs=options["slot_copy_gbs"], slot_write_gbs=options["slot_write_gbs"])
            try:
                calibration = calibration_assume(rig=rig, label=options["label"])
            except KeyError as exc:
                raise CommandError(str(exc)) from None
            self._show(calibration)
            self.stdout.write("assumptions (each replaced by a measurement on a rig day):")
            for item in calibration.assumptions:
                self.stdout.write(f"  {item['name']}: {item['value']:g} {item['unit']} | source: {item['source']} | "
                                  f"replaced by: {item['replaced_by']}")
        else:
            try:
                if options["worker"]:
                    runs = runs_of_worker(options["worker"])
                    if not runs:
                        raise CalibrationRefused(f"no finished benchmark runs of worker {options['worker']!r}: run "
                                                 f"`bench` against it first (a prompt-size and a concurrency sweep)")
                else:
                    ids = parse_ids(options["runs"])
                    runs = list(BenchmarkRun.objects.filter(pk__in=ids).select_related("worker").order_by("id"))
                    missing = sorted(set(ids) - {run.pk for run in runs})
                    if missing:
                        raise CalibrationRefused(f"no such run: {', '.join(map(str, missing))}")
                loaded: list[BenchmarkRun] = []
                if options["loaded_label"]:
                    if options["loaded_workers"] < 2:
                        raise CalibrationRefused("--loaded-workers counts this worker too: 2 or more")
                    loaded = [run for run in runs if options["loaded_label"] in run.label]
                    runs = [run for run in runs if options["loaded_label"] not in run.label]
                    if not loaded or not runs:
                        raise CalibrationRefused(
                            f"--loaded-label {options['loaded_label']!r}: {len(loaded)} runs hold it and {len(runs)} "
                            f"do not; both kinds are needed (the worker benched alone, and beside the others)")
                # the worker the runs measured, as they reached it
                worker = runs[0].worker
                worker_url = worker.base_url if worker else runs[0].base_url
                worker_key = (worker.api_key or None) if worker else None
                tokens, basis = None, None
                if options["count_tokens"] or options["tokens_url"]:
                    tokens, basis = count_tokens(options["tokens_url"] or worker_url,
                                                 None if options["tokens_url"] else worker_key,
                                                 scale=options["token_scale"])
                slot_files = measure_slot_files(worker_url, worker_key) if options["slot_files"] else None
                calibration, fit = calibration_fit(runs=runs, label=options["label"], tokens=tokens,
                                                   tokens_basis=basis, loaded_runs=loaded,
                                                   loaded_workers=options["loaded_workers"],
                                                   load_factor=options["load_factor"], slot_files=slot_files)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            self._show(calibration)
            self.stdout.write(f"residuals (measured - fitted), from {fit.prefill_points} requests at concurrency 1 "
                              f"and {fit.decode_points} runs:")
            for line in residual_lines(calibration.residuals):
                self.stdout.write(line)
        for note in calibration.notes:
            self.stdout.write(f"note: {note}")
        self.stdout.write(f"calibration {calibration.pk}")

    def _show(self, calibration: Calibration) -> None:
        self.stdout.write(f"{calibration.get_source_display()}: {calibration.label}")
        for line in cost_lines(CostModel.from_dict(calibration.cost)):
            self.stdout.write(line)
