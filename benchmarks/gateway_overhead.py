"""What the gateway costs on the hot path: time to first token and throughput, through the
gateway versus straight to the same llama-server, measured side by side in one run.

    .venv/bin/python benchmarks/gateway_overhead.py [--requests 40] [--streams 32] [--rounds 3]

Runs on the embedded default in a temporary directory: one llama-server (SmolLM2, CPU) with
32 slots, one gateway process (python -m ocsweb.gateway, i.e. daphne) in front of it. Direct and
gateway measurements alternate so that machine noise hits both alike; the printed ratios are the
result. Budget (DEVELOPERS.md): <= ~3 ms added to TTFT, >= 0.90 of direct throughput at 32
streams on 2 cores.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODEL = "smollm2-135m-instruct"
PROMPT = [{"role": "user", "content": "Write a short poem about rivers."}]


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def wait_ok(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer")


async def first_token_ms(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> float:
    body = {"model": MODEL, "messages": PROMPT, "stream": True, "max_tokens": 4}
    started = time.perf_counter()
    async with client.stream("POST", url, json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content"' in line:
                return (time.perf_counter() - started) * 1000
    raise RuntimeError("no content chunk")


async def stream_tokens(client: httpx.AsyncClient, url: str, headers: dict[str, str], tokens: int) -> int:
    body = {"model": MODEL, "messages": PROMPT, "stream": True, "max_tokens": tokens, "ignore_eos": True}
    count = 0
    async with client.stream("POST", url, json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content"' in line:
                count += 1
    return count


async def measure(direct: str, gateway: str, key: str, *, requests: int, streams: int, rounds: int) -> None:
    auth = {"Authorization": f"Bearer {key}"}
    targets = {"direct": (direct + "/v1/chat/completions", {}), "gateway": (gateway + "/v1/chat/completions", auth)}
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=200)) as client:
        for name, (url, headers) in targets.items():  # warm-up, dropped
            for _ in range(3):
                await first_token_ms(client, url, headers)
        ttft: dict[str, list[float]] = {"direct": [], "gateway": []}
        for _ in range(requests):
            for name, (url, headers) in targets.items():
                ttft[name].append(await first_token_ms(client, url, headers))
        throughput: dict[str, list[float]] = {"direct": [], "gateway": []}
        for _ in range(rounds):
            for name, (url, headers) in targets.items():
                started = time.perf_counter()
                counts = await asyncio.gather(*(stream_tokens(client, url, headers, 64) for _ in range(streams)))
                throughput[name].append(sum(counts) / (time.perf_counter() - started))

    def pct(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100)[int(q) - 1]

    print(f"\nTTFT over {requests} sequential requests each (3 warm-up requests dropped), ms:")
    for name, values in ttft.items():
        print(f"  {name:8} p50 {statistics.median(values):7.2f}  p90 {pct(values, 90):7.2f}  "
              f"mean {statistics.mean(values):7.2f}")
    added = statistics.median(ttft["gateway"]) - statistics.median(ttft["direct"])
    print(f"  gateway adds {added:+.2f} ms at p50 (budget: ~3 ms)")
    print(f"\nThroughput, {streams} concurrent streams x 64 tokens, {rounds} alternating rounds, tokens/s:")
    for name, values in throughput.items():
        print(f"  {name:8} " + "  ".join(f"{v:7.1f}" for v in values) + f"   median {statistics.median(values):7.1f}")
    ratio = statistics.median(throughput["gateway"]) / statistics.median(throughput["direct"])
    print(f"  gateway / direct = {ratio:.2f} (budget: >= 0.90)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from fleet.local_worker import LlamaServerProcess, LlamaServerSpec, find_default_model, free_port

    with tempfile.TemporaryDirectory() as var:
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
        env.update(OCS_VAR_DIR=var, DJANGO_SETTINGS_MODULE="ocsweb.settings", OCS_DEFAULT_CONCURRENCY="256",
                   # limits on (high enough never to refuse): the quota step runs on every request
                   OCS_DEFAULT_REQUESTS_PER_MINUTE="1000000", OCS_DEFAULT_TOKENS_PER_DAY="1000000000")
        worker = LlamaServerProcess(LlamaServerSpec(model_path=find_default_model(), port=free_port(),
                                                    slots=args.streams, context=512 * args.streams)).start()
        gateway = None
        try:
            worker.wait_healthy(60)
            manage(env, "migrate", "-v0")
            manage(env, "register_worker", "--name", "bench", "--url", worker.spec.base_url, "--model", MODEL,
                   "--slots", str(args.streams))
            manage(env, "shell", "--no-imports", "-c",
                   "from accounts.services import user_ensure; user_ensure(username='bench', role='student')")
            key = manage(env, "issue_key", "bench")
            port = free_port()
            gateway = subprocess.Popen(
                [sys.executable, "-m", "ocsweb.gateway", "-b", "127.0.0.1", "-p", str(port),
                 "--access-log", os.devnull, "ocsweb.asgi:application"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_ok(f"http://127.0.0.1:{port}/healthz")
            print(f"llama-server {worker.spec.base_url} ({args.streams} slots), gateway http://127.0.0.1:{port} "
                  f"(daphne, embedded default), {os.cpu_count()} CPUs")
            asyncio.run(measure(worker.spec.base_url, f"http://127.0.0.1:{port}", key,
                                requests=args.requests, streams=args.streams, rounds=args.rounds))
        finally:
            if gateway is not None:
                gateway.terminate()
                gateway.wait()
            worker.stop()


if __name__ == "__main__":
    main()
