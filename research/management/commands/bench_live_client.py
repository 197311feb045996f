"""`manage.py bench_live_client`: what the live state's round trips cost the gateway's process on
Redis, two ways of sending them side by side.

    manage.py bench_live_client [--compare parser|scripts|packing] [--ops 2000] [--concurrency 1,64]
                                [--rounds 2] [--no-save]

--compare parser (the default): redis-py's C reply parser (hiredis) against its pure-Python one
(hiredis blocked from import), on the gateway's own read of the load (`view`: busy slots of two
workers, the suspects, the conversation's worker and whose turn it is in a line: one pipeline
with a Lua script), one round trip per op.
--compare scripts: the Lua scripts sent by their text on every call (EVAL) against by their SHA1
(EVALSHA, core/live.py LuaScript), on what a request does with a free slot (the quota step, the
load, the slot claim, the end: four round trips, three scripts), one request per op.
--compare packing: commands packed by redis-py's asyncio code in Python against by hiredis's C
packer (core/live.py packed_by_hiredis), on the same request.

Each round runs the two ways in two child processes, one after the other, `--ops` ops at each
concurrency, and reports the child's CPU per op and ops per second. Rounds alternate the order,
so a drift of the machine's speed falls on both. Prints the ratios (second way / first) and
stores the result as a probe run (`/research/runs/<id>/`), unless --no-save. Needs REDIS_URL (or
--redis-url); writes only keys under a fresh namespace.
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
from django.utils import timezone

from research.models import BenchmarkRun
from research.services import new_group

# Each comparison: its two ways (the first is the baseline), and what one op is.
WAYS = {"parser": ("python", "hiredis"), "scripts": ("eval", "evalsha"), "packing": ("python-pack", "hiredis-pack")}
OPS = {"parser": "view", "scripts": "request", "packing": "request"}

CHILD = r"""
import asyncio, json, os, sys, time, uuid
way, op = sys.argv[1], sys.argv[6]
if way == "python":
    sys.modules["hiredis"] = None  # redis-py then falls back to its pure-Python parser
import django
django.setup()
import redis.utils
from accounts.limits.quota import QuotaAsk, QuotaScope
import core.live
from core.live import RedisLiveState, Settlement
from ocsweb.live import SiteRedisLiveState

if way == "eval":  # every script by its text, as before LuaScript
    async def by_text(self, script, keys, *args):
        return await self._client().eval(script.text, len(keys), *keys, *args)
    RedisLiveState.script = by_text
    RedisLiveState.queue_script = staticmethod(
        lambda pipe, script, keys, *args: pipe.eval(script.text, len(keys), *keys, *args))
if way == "python-pack":  # commands packed by redis-py's asyncio code, in Python
    core.live.packed_by_hiredis = lambda connection_class: connection_class

SCOPES = [QuotaScope("user:1", 10**9, 10**12, 10**6)]

async def main():
    live = SiteRedisLiveState(sys.argv[2], sys.argv[3])
    ops, levels, out = int(sys.argv[4]), [int(c) for c in sys.argv[5].split(",")], {}
    capacity = max(levels) + 1

    async def request():
        ask = QuotaAsk(uuid.uuid4().hex, 100, "D2026-12-07", 30.0)
        await live.admit_seen(SCOPES, ask, "keys")
        await live.view([1, 2], "conv", fair_line="1:m", fair_policy="tokens")
        claim = await live.claim_slot("worker:1", capacity, 30.0, student="1", conversation="conv")
        await live.finish(Settlement(leases=(("worker:1", claim.lease_id), ("conc:user:1", ask.request_id))))

    async def view():
        await live.view([1, 2], "conv", fair_line="1:m", fair_policy="tokens")

    one_op = request if op == "request" else view
    await one_op()  # connect, load the scripts
    for level in levels:
        left = [ops]
        async def caller():
            while left[0] > 0:
                left[0] -= 1
                await one_op()
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(level)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        out[str(level)] = {"cpu_us_per_op": cpu / ops * 1e6, "ops_per_s": ops / wall}
    print(json.dumps({"hiredis": bool(redis.utils.HIREDIS_AVAILABLE), "levels": out}))

asyncio.run(main())
"""


def run_child(way: str, url: str, namespace: str, ops: int, levels: str, op: str = "view") -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CHILD, way, url, namespace, str(ops), levels, op],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(settings.BASE_DIR)})
    if done.returncode != 0:
        raise CommandError(f"the {way} child failed: {done.stderr.strip()[-500:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["hiredis"] != (way != "python"):
        raise CommandError(f"the {way} child ran with hiredis={result['hiredis']}: is hiredis installed?")
    return result["levels"]


def compare(rounds: list[dict[str, dict[str, Any]]], ways: tuple[str, str] = WAYS["parser"]) -> dict[str, Any]:
    """Per level: each way's median CPU per op and ops/s over the rounds, and the second way's
    over the first's."""
    first, second = ways
    levels = sorted({level for one in rounds for level in one[first]}, key=int)
    table: dict[str, Any] = {}
    for level in levels:
        row: dict[str, Any] = {}
        for way in ways:
            row[way] = {key: statistics.median(one[way][level][key] for one in rounds)
                        for key in ("cpu_us_per_op", "ops_per_s")}
        row["cpu_ratio"] = row[second]["cpu_us_per_op"] / row[first]["cpu_us_per_op"]
        row["throughput_ratio"] = row[second]["ops_per_s"] / row[first]["ops_per_s"]
        table[level] = row
    return table


LABELS = {"parser": ("live-state round trip: hiredis against the Python parser", "round trip",
                     "Python parser", "hiredis"),
          "scripts": ("a request's live-state round trips: scripts by SHA1 against by text", "request",
                      "scripts by text", "by SHA1"),
          "packing": ("a request's live-state round trips: commands packed by hiredis against by redis-py",
                      "request", "packed in Python", "by hiredis")}
SCENARIOS = {"parser": "probe-live-client", "scripts": "probe-live-scripts", "packing": "probe-live-packing"}


class Command(BaseCommand):
    help = "CPU per live-state round trip on Redis, two ways of sending them side by side (see --compare)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--compare", choices=sorted(WAYS), default="parser",
                            help="parser: hiredis against the pure-Python parser, on the load's read (default); "
                                 "scripts: Lua scripts by SHA1 against by text; packing: commands packed by hiredis "
                                 "against by redis-py's Python; both on a request's four round trips.")
        parser.add_argument("--redis-url", default=None, help="Default: REDIS_URL.")
        parser.add_argument("--ops", type=int, default=2000, help="Ops per level and round (default 2000).")
        parser.add_argument("--concurrency", default="1,64", help="Callers at once (default 1,64).")
        parser.add_argument("--rounds", type=int, default=2, help="Rounds, each running both ways (default 2).")
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
        comparison = options["compare"]
        ways, op = WAYS[comparison], OPS[comparison]
        label, unit, first_name, second_name = LABELS[comparison]
        rounds = []
        for number in range(options["rounds"]):
            order = ways if number % 2 == 0 else ways[::-1]
            namespace = f"bench-live-{uuid.uuid4().hex[:8]}"
            rounds.append({way: run_child(way, url, namespace, options["ops"], levels, op) for way in order})
        table = compare(rounds, ways)
        first, second = ways
        for level, row in table.items():
            self.stdout.write(
                f"{level:>4} at once: CPU per {unit} {row[first]['cpu_us_per_op']:.0f} µs ({first_name}) → "
                f"{row[second]['cpu_us_per_op']:.0f} µs ({second_name}), x{row['cpu_ratio']:.2f}; {unit}s/s "
                f"{row[first]['ops_per_s']:.0f} → {row[second]['ops_per_s']:.0f}, x{row['throughput_ratio']:.2f}")
        result = {"compare": comparison, "op": op, "ops": options["ops"], "rounds": rounds, "table": table,
                  "load_average": os.getloadavg()}
        if not options["no_save"]:
            now = timezone.now()
            run = BenchmarkRun.objects.create(
                kind=BenchmarkRun.Kind.PROBE, group=new_group(),
                scenario=SCENARIOS[comparison],
                label=label, target=BenchmarkRun.Target.GATEWAY,
                base_url=url.split("@")[-1], model="", prompt_tokens=0, output_tokens=0, requests=0,
                status=BenchmarkRun.Status.DONE, ended_at=now, summary=result)
            self.stdout.write(f"stored as run {run.pk}: /research/runs/{run.pk}/")
