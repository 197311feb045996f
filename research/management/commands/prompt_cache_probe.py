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
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.local_worker import (
    ISOLATION_ARGS,
    LaunchOptions,
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


class Server:
    def __init__(self, args: list[str], port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = log.open("w")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CommandError(f"llama-server exited ({self.process.returncode}); see {self.log.name}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise CommandError(f"llama-server did not come up in {timeout_s:.0f} s; see {self.log.name}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def chat(self, messages: list[dict[str, str]], max_tokens: int) -> tuple[str, int | None]:
        response = httpx.post(f"{self.url}/v1/chat/completions", timeout=300.0, json={
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

        def command(slots: int) -> list[str]:
            spec = LlamaServerSpec(model_path=model, port=free_port(), context=CONTEXT, slots=slots,
                                   options=LaunchOptions(threads=local_threads()))
            args = spec.command(binary)
            return args if options["verbosity_llama"] is None else [*args, "-lv", str(options["verbosity_llama"])]

        def started(args: list[str], name: str) -> Server:
            port = int(args[args.index("--port") + 1])
            server = Server(args, port, logs / f"{name}.log")
            server.wait_ready()
            return server

        clean = started(command(1), "clean")
        try:
            baseline = {q: clean.chat(question_messages(q), max_tokens)[0] for q in QUESTIONS}
        except httpx.HTTPError as exc:
            raise CommandError(f"the clean server did not answer ({exc}); see {clean.log.name}") from exc
        finally:
            clean.stop()

        variants = {"defaults": without(command(SLOTS), ISOLATION_ARGS), "platform": command(SLOTS)}
        wanted = ["defaults", "platform"] if options["variant"] == "both" else [options["variant"]]
        summaries: dict[str, dict[str, Any]] = {}
        for name in wanted:
            server_args = variants[name]
            result = VariantResult(name=name, flags=list(ISOLATION_ARGS) if name == "platform" else [],
                                   markers=seeds)
            server = started(server_args, name)
            try:
                self._run(server, result, seeds, baseline, options["seed_conversations"], options["rounds"],
                          max_tokens)
            except httpx.HTTPError as exc:
                raise CommandError(f"{name}: a seeding request failed ({exc}); see {server.log.name}") from exc
            finally:
                server.stop()
            summaries[name] = result.summary()
            self.stdout.write(json.dumps(summaries[name], indent=1))
        self.stdout.write(verdict(summaries))
        self.stdout.write(f"server logs: {logs}")
        if options["json_path"]:
            Path(options["json_path"]).write_text(json.dumps({"variants": summaries, "baseline": baseline}, indent=1))

    def _run(self, server: Server, result: VariantResult, seeds: list[str], baseline: dict[str, str],
             seed_conversations: int, rounds: int, max_tokens: int) -> None:
        for marker in seeds[:seed_conversations]:
            server.chat(seed_messages(marker), max_tokens)

        def ask(round_: int, question: str) -> ProbeAnswer:
            try:
                answer, cached = server.chat(question_messages(question), max_tokens)
            except httpx.HTTPError as exc:
                return ProbeAnswer(round=round_, question=question, answer="", baseline=baseline[question],
                                   error=str(exc))
            return ProbeAnswer(round=round_, question=question, answer=answer, baseline=baseline[question],
                               cached_tokens=cached)

        with ThreadPoolExecutor(max_workers=2) as pool:
            for r in range(rounds):
                server.chat(seed_messages(seeds[(seed_conversations + r) % len(seeds)]), max_tokens)
                pair = (QUESTIONS[(2 * r) % len(QUESTIONS)], QUESTIONS[(2 * r + 1) % len(QUESTIONS)])
                result.answers.extend(pool.map(lambda q: ask(r, q), pair))
