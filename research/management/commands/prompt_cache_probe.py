"""`manage.py prompt_cache_probe`: llama.cpp #27148 tried on the pinned llama-server.

    manage.py prompt_cache_probe                      # both variants, 30 rounds each
    manage.py prompt_cache_probe --variant defaults --rounds 60 --json /tmp/probe.json

Starts its own llama-server (the demo's model, 2 slots) three times: a clean one (1 slot, no RAM
cache) for each question's reference answer, then once per variant: `defaults` (llama-server's
own prompt-cache flags: `--cache-ram` 8,192 MiB, `--cache-idle-slots`) and `platform` (the flags
the platform launches every worker with, fleet.local_worker.ISOLATION_ARGS). Per variant: a few
conversations full of a marker word are answered one after another, then each round answers one
more such conversation and then two unrelated questions at once (both slots change hands
together). It prints, per variant, how many unrelated answers carried a marker and how many
differ from the clean server's (research/prompt_cache_probe.py says what each sign means).
Requests are not pinned to a slot, so the variants differ by the flags alone.
"""
from __future__ import annotations

import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.local_worker import (
    ISOLATION_ARGS,
    LaunchOptions,
    LlamaServerProcess,
    LlamaServerSpec,
    WorkerRuntimeMissing,
    find_default_model,
    find_llama_server,
    free_port,
    local_threads,
)
from research.prompt_cache_probe import (
    QUESTIONS,
    ProbeAnswer,
    VariantResult,
    markers,
    question_messages,
    seed_messages,
    verdict,
)

SLOTS = 2
CONTEXT = 4096  # 2,048 tokens a slot


def without(args: list[str], part: tuple[str, ...]) -> list[str]:
    """`args` with the run of arguments `part` (as LlamaServerSpec.command writes ISOLATION_ARGS:
    together, in order) taken out; `args` unchanged when it is not there."""
    n = len(part)
    for i in range(len(args) - n + 1):
        if tuple(args[i:i + n]) == part:
            return args[:i] + args[i + n:]
    return list(args)


@dataclass(frozen=True)
class ProbeSpec(LlamaServerSpec):
    """A worker's launch less the platform's isolation flags when `isolated` is False: llama-server's
    own prompt-cache defaults, which only this probe ever runs."""

    isolated: bool = True

    def command(self, binary: Path, *, slot_dir: Path | None = None) -> list[str]:
        args = super().command(binary, slot_dir=slot_dir)
        return args if self.isolated else without(args, ISOLATION_ARGS)


def chat(base_url: str, messages: list[dict[str, str]], max_tokens: int) -> tuple[str, int | None]:
    """A greedy answer and the response's cached token count."""
    response = httpx.post(f"{base_url}/v1/chat/completions", timeout=300.0, json={
        "messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": 1})
    response.raise_for_status()
    body = response.json()
    details = (body.get("usage") or {}).get("prompt_tokens_details") or {}
    return body["choices"][0]["message"].get("content") or "", details.get("cached_tokens")


class Command(BaseCommand):
    help = "Try llama.cpp #27148 (a RAM prompt cache restoring an unrelated conversation) on the pinned llama-server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--variant", choices=["defaults", "platform", "both"], default="both")
        parser.add_argument("--seed-conversations", type=int, default=6,
                            help="conversations with a marker answered before the rounds (default 6)")
        parser.add_argument("--rounds", type=int, default=30)
        parser.add_argument("--max-tokens", type=int, default=24)
        parser.add_argument("--seed", type=int, default=0, help="which markers")
        parser.add_argument("--verbosity-llama", type=int, default=None,
                            help="llama-server's -lv (5: its prompt-cache trace in the logs)")
        parser.add_argument("--json", dest="json_path", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            binary, model = find_llama_server(), find_default_model()
        except WorkerRuntimeMissing as exc:
            raise CommandError(str(exc)) from exc
        logs = Path(tempfile.mkdtemp(prefix="ocs-cache-probe-"))
        seeds = markers(min(options["seed_conversations"] + options["rounds"], 16), seed=options["seed"])
        max_tokens = options["max_tokens"]
        verbosity = () if options["verbosity_llama"] is None else ("-lv", str(options["verbosity_llama"]))

        def started(name: str, *, slots: int, isolated: bool = True) -> LlamaServerProcess:
            spec = ProbeSpec(model_path=model, port=free_port(), context=CONTEXT, slots=slots, isolated=isolated,
                             options=LaunchOptions(threads=local_threads(), extra_args=verbosity))
            server = LlamaServerProcess(spec, log_path=logs / f"{name}.log", binary=binary).start()
            try:
                server.wait_healthy(timeout_s=120.0)
            except (RuntimeError, TimeoutError) as exc:
                server.stop()
                raise CommandError(f"{name}: {exc}; see {server.log_path}") from exc
            return server

        clean = started("clean", slots=1)
        try:
            baseline = {q: chat(clean.spec.base_url, question_messages(q), max_tokens)[0] for q in QUESTIONS}
        except httpx.HTTPError as exc:
            raise CommandError(f"the clean server did not answer ({exc}); see {clean.log_path}") from exc
        finally:
            clean.stop()

        wanted = ["defaults", "platform"] if options["variant"] == "both" else [options["variant"]]
        summaries: dict[str, dict[str, Any]] = {}
        for name in wanted:
            result = VariantResult(name=name, flags=list(ISOLATION_ARGS) if name == "platform" else [],
                                   markers=seeds)
            server = started(name, slots=SLOTS, isolated=name == "platform")
            try:
                self._run(server.spec.base_url, result, seeds, baseline, options["seed_conversations"],
                          options["rounds"], max_tokens)
            except httpx.HTTPError as exc:
                raise CommandError(f"{name}: a seeding request failed ({exc}); see {server.log_path}") from exc
            finally:
                server.stop()
            summaries[name] = result.summary()
            self.stdout.write(json.dumps(summaries[name], indent=1))
        self.stdout.write(verdict(summaries))
        self.stdout.write(f"server logs: {logs}")
        if options["json_path"]:
            Path(options["json_path"]).write_text(json.dumps({"variants": summaries, "baseline": baseline}, indent=1))

    def _run(self, base_url: str, result: VariantResult, seeds: list[str], baseline: dict[str, str],
             seed_conversations: int, rounds: int, max_tokens: int) -> None:
        for marker in seeds[:seed_conversations]:
            chat(base_url, seed_messages(marker), max_tokens)

        def ask(round_: int, question: str) -> ProbeAnswer:
            try:
                answer, cached = chat(base_url, question_messages(question), max_tokens)
            except httpx.HTTPError as exc:
                return ProbeAnswer(round=round_, question=question, answer="", baseline=baseline[question],
                                   error=str(exc))
            return ProbeAnswer(round=round_, question=question, answer=answer, baseline=baseline[question],
                               cached_tokens=cached)

        with ThreadPoolExecutor(max_workers=2) as pool:
            for r in range(rounds):
                chat(base_url, seed_messages(seeds[(seed_conversations + r) % len(seeds)]), max_tokens)
                pair = (QUESTIONS[(2 * r) % len(QUESTIONS)], QUESTIONS[(2 * r + 1) % len(QUESTIONS)])
                result.answers.extend(pool.map(lambda q: ask(r, q), pair))
