"""`manage.py bench_live_client`: what one live-state round trip costs the gateway's process on
Redis, two ways side by side: `--compare parser`, redis.asyncio with its C reply parser (hiredis)
and with its pure-Python one; `--compare client`, redis.asyncio (with hiredis) against the
gateway's own client (core/lean_redis.py, OCS_LIVE_REDIS_CLIENT); `--compare floor`, a bare PING
through the lean client (the least a round trip can cost the process: a write, a read, a wake-up)
against the gateway's read of the load through it.

    manage.py bench_live_client [--compare parser|client|floor] [--ops 2000] [--concurrency 1,64] [--rounds 2] [--no-save]

Each round runs, in two child processes one after the other (with `parser`, hiredis blocked from
import in one), the gateway's own read of the load (`view`: busy slots of two workers, the suspects, the
conversation's worker and whose turn it is in a line: one pipeline with a Lua script) `--ops`
times at each concurrency, and reports the child's CPU per round trip and round trips per second.
Rounds alternate the order, so a drift of the machine's speed falls on both. Prints the ratios
(hiredis / Python, or lean / redis-py) and stores the result as a probe run (`/research/runs/<id>/`), unless
--no-save. Needs REDIS_URL (or --redis-url); writes only keys under a fresh namespace.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import uuid
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.replay_services import probe_record

# Per comparison: (the baseline, the candidate); each name is a child's variant.
MODES = {"parser": ("python", "hiredis"), "client": ("redis-py", "lean"), "floor": ("ping", "lean")}
LEAN_VARIANTS = ("lean", "ping")  # the children that talk through core/lean_redis.py

CHILD = r"""
import asyncio, json, os, sys, time
if sys.argv[1] == "python":
    sys.modules["hiredis"] = None  # redis-py then falls back to its pure-Python parser
import django
django.setup()
import redis.utils
from ocsweb.live import SiteRedisLiveState

async def main():
    live = SiteRedisLiveState(sys.argv[2], sys.argv[3], "lean" if sys.argv[1] in ("lean", "ping") else "redis-py")
    if sys.argv[1] == "ping":  # the floor: one bare command, none of the live state's work around it
        async def op():
            await live._lean_client.execute_raw([("PING",)])
    else:
        async def op():
            await live.view([1, 2], "conv", fair_line="1:m", fair_policy="tokens")
    ops, levels, out = int(sys.argv[4]), [int(c) for c in sys.argv[5].split(",")], {}
    await live.view([1, 2], "conv", fair_line="1:m", fair_policy="tokens")  # connect, load the script
    for level in levels:
        left = [ops]
        async def one():
            while left[0] > 0:
                left[0] -= 1
                await op()
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one() for _ in range(level)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        out[str(level)] = {"cpu_us_per_op": cpu / ops * 1e6, "ops_per_s": ops / wall}
    print(json.dumps({"hiredis": bool(redis.utils.HIREDIS_AVAILABLE), "lean": live._lean_client is not None, "levels": out}))

asyncio.run(main())
"""


def run_child(variant: str, url: str, namespace: str, ops: int, levels: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CHILD, variant, url, namespace, str(ops), levels],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(settings.BASE_DIR)})
    if done.returncode != 0:
        raise CommandError(f"the {variant} child failed: {done.stderr.strip()[-500:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["hiredis"] != (variant != "python"):
        raise CommandError(f"the {variant} child ran with hiredis={result['hiredis']}: is hiredis installed?")
    if result["lean"] != (variant in LEAN_VARIANTS):
        raise CommandError(f"the {variant} child ran with the lean client={result['lean']}")
    return result["levels"]


def compare(rounds: list[dict[str, dict[str, Any]]], mode: str = "parser") -> dict[str, Any]:
    """Per level: each variant's median CPU per op and ops/s over the rounds, and candidate / baseline."""
    baseline, candidate = MODES[mode]
    levels = sorted({level for one in rounds for level in one[baseline]}, key=int)
    table: dict[str, Any] = {}
    for level in levels:
        row: dict[str, Any] = {}
        for variant in (baseline, candidate):
            row[variant] = {key: statistics.median(one[variant][level][key] for one in rounds)
                            for key in ("cpu_us_per_op", "ops_per_s")}
        row["cpu_ratio"] = row[candidate]["cpu_us_per_op"] / row[baseline]["cpu_us_per_op"]
        row["throughput_ratio"] = row[candidate]["ops_per_s"] / row[baseline]["ops_per_s"]
        table[level] = row
    return table


class Command(BaseCommand):
    help = "CPU per live-state round trip on Redis: two parsers or two clients, side by side."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--redis-url", default=None, help="Default: REDIS_URL.")
        parser.add_argument("--compare", choices=sorted(MODES), default="parser",
                            help="parser: hiredis against redis-py's Python parser (default); "
                                 "client: the gateway's lean client against redis.asyncio; "
                                 "floor: the lean client's bare PING against its read of the load.")
        parser.add_argument("--ops", type=int, default=2000, help="Round trips per level and round (default 2000).")
        parser.add_argument("--concurrency", default="1,64", help="Callers at once (default 1,64).")
        parser.add_argument("--rounds", type=int, default=2, help="Rounds, each running both parsers (default 2).")
        parser.add_argument("--no-save", action="store_true", help="Do not store it as a run.")

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["redis_url"] or settings.REDIS_URL
        if not url:
            raise CommandError("needs Redis: set REDIS_URL or pass --redis-url")
        if options["ops"] < 1 or options["rounds"] < 1:
            raise CommandError("--ops and --rounds must be at least 1")
        try:
            levels = ",".join(str(int(c)) for c in options["concurrency"].split(",") if int(c) >= 1)
        except ValueError:
            raise CommandError("--concurrency: whole numbers, comma-separated (1,64)") from None
        if not levels:
            raise CommandError("--concurrency: at least one level of 1 or more")
        mode = options["compare"]
        baseline, candidate = MODES[mode]
        rounds = []
        for number in range(options["rounds"]):
            order = (baseline, candidate) if number % 2 == 0 else (candidate, baseline)
            namespace = f"bench-live-{uuid.uuid4().hex[:8]}"
            rounds.append({variant: run_child(variant, url, namespace, options["ops"], levels) for variant in order})
        table = compare(rounds, mode)
        for level, row in table.items():
            self.stdout.write(
                f"{level:>4} at once: CPU per round trip {row[baseline]['cpu_us_per_op']:.0f} µs ({baseline}) → "
                f"{row[candidate]['cpu_us_per_op']:.0f} µs ({candidate}), x{row['cpu_ratio']:.2f}; round trips/s "
                f"{row[baseline]['ops_per_s']:.0f} → {row[candidate]['ops_per_s']:.0f}, x{row['throughput_ratio']:.2f}")
        result = {"compare": mode, "ops": options["ops"], "rounds": rounds, "table": table,
                  "load_average": os.getloadavg()}
        if not options["no_save"]:
            run = probe_record(name="live-client", base_url=url.split("@")[-1], model="", result=result,
                               label=f"live-state round trip: {candidate} against {baseline}")
            self.stdout.write(f"stored as run {run.pk}: /research/runs/{run.pk}/")
