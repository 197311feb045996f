"""The load generator: streams chat completions from an OpenAI-compatible server and times them.

No Django here: `run_level` takes the prompts and the load shape and returns what each request
saw. Two load modes, as vLLM's `bench serve`: a fixed number of requests in flight (closed loop,
`concurrency`) or Poisson arrivals at `rate` requests per second (open loop). Warm-up requests go
first, one at a time, and are marked so the summary leaves them out.

Prompts are built deterministically from a fixed list of common words (about one token each with
a leading space); `fit_prompt_words` fits the word count to a wanted prompt-token count with the
server's own token count (chat template included), which generates nothing: `bench --requests 1
--warmup 0` sends exactly one generation.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from research.metrics import RequestTiming

WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one "
    "had by word but not what all were we when your can said there use an each which she do how their "
    "if will up other about out many then them these so some her would make like him into time has look "
    "two more write go see number no way could people my than first water been call who oil its now find "
    "long down day did get come made may part over new sound take only little work know place year live "
    "me back give most very after thing our just name good sentence man think say great where help through "
    "much before line right too mean old any same tell boy follow came want show also around form three "
    "small set put end does another well large must big even such because turn here why ask went men read "
    "need land different home us move try kind hand picture again change off play spell air away animal "
    "house point page letter mother answer found study still learn should world"
).split()


def prompt_text(*, words: int, seed: int) -> str:
    """`words` words drawn deterministically from WORDS by `seed` (same seed, same text)."""
    picker = random.Random(seed)
    return "Repeat these words back: " + " ".join(picker.choice(WORDS) for _ in range(max(words, 1)))


def shared_prefix_prompt(*, prefix_words: int, suffix_words: int, seed: int, prefix_seed: int = 0) -> str:
    """A long fixed prefix (the same for every seed) and a short per-request suffix."""
    return prompt_text(words=prefix_words, seed=prefix_seed) + " Now: " + prompt_text(words=suffix_words, seed=seed)


@dataclass
class Sample:
    """One request: client timing plus llama-server's `timings` when the stream carried them."""

    index: int
    warmup: bool
    timing: RequestTiming
    error: str = ""
    cached_tokens: int | None = None
    prompt_per_second: float | None = None
    predicted_per_second: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    content: str = ""


def server_root(base_url: str) -> str:
    """The server's root from what a user may paste: `http://host:8081`, `https://gw/v1` (the
    OCS_BASE_URL the demo prints, the base URL OpenAI clients take) or either with a trailing
    slash all give the root, which the load generator appends `/v1/chat/completions` to."""
    root = base_url.strip().rstrip("/")
    while root.endswith("/v1"):
        root = root[: -len("/v1")].rstrip("/")
    return root


@dataclass
class Target:
    """Where to send requests: a llama-server root or the gateway (which needs `api_key`)."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 600.0
    extra_body: dict[str, Any] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def chat_url(self) -> str:
        return server_root(self.base_url) + "/v1/chat/completions"


def request_body(target: Target, messages: list[dict[str, str]], output_tokens: int) -> dict[str, Any]:
    """Greedy, exactly `output_tokens` where the server honours `ignore_eos` (llama-server does)."""
    return {
        "model": target.model,
        "messages": messages,
        "max_tokens": output_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        **target.extra_body,
    }


async def stream_one(
    client: httpx.AsyncClient, target: Target, *, messages: list[dict[str, str]], output_tokens: int,
    index: int, warmup: bool,
) -> Sample:
    """Sends one streaming request and times it; errors are recorded, never raised. A pooled
    keep-alive connection that the server already closed (llama-server drops idle ones) fails
    before any response; that attempt is retried once on a fresh connection, timed from the retry."""
    sample = await _stream_once(client, target, messages=messages, output_tokens=output_tokens, index=index,
                                warmup=warmup)
    if sample.error.startswith("RemoteProtocolError") and not sample.timing.chunk_times_s:
        sample = await _stream_once(client, target, messages=messages, output_tokens=output_tokens, index=index,
                                    warmup=warmup)
    return sample


async def _stream_once(
    client: httpx.AsyncClient, target: Target, *, messages: list[dict[str, str]], output_tokens: int,
    index: int, warmup: bool,
) -> Sample:
    chunks: list[float] = []
    parts: list[str] = []
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    sent = time.perf_counter()
    error = ""
    try:
        async with client.stream(
            "POST", target.chat_url, json=request_body(target, messages, output_tokens), headers=target.headers(),
            timeout=target.timeout_s,
        ) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                error = f"HTTP {response.status_code}: {body[:200]}"
            else:
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        continue
                    arrived = time.perf_counter()
                    try:
                        data = json.loads(payload)
                    except json.JSONDecodeError:
                        continue
                    if "error" in data:
                        error = str(data["error"])[:200]
                    for choice in data.get("choices") or []:
                        delta = choice.get("delta") or {}
                        text = delta.get("content") or delta.get("reasoning_content") or ""
                        if text:
                            chunks.append(arrived)
                            parts.append(text)
                    usage = data.get("usage") or usage
                    timings = data.get("timings") or timings
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    end = time.perf_counter()
    output = usage.get("completion_tokens") or timings.get("predicted_n") or len(chunks)
    prompt = usage.get("prompt_tokens") or (timings.get("prompt_n", 0) + timings.get("cache_n", 0))
    ok = not error and bool(chunks)
    if not error and not chunks:
        error = "no content streamed"

    def number(name: str) -> float | None:
        value = timings.get(name)
        return float(value) if isinstance(value, (int, float)) else None

    def count(name: str) -> int | None:
        value = timings.get(name)
        return int(value) if isinstance(value, int) else None

    return Sample(
        index=index,
        warmup=warmup,
        timing=RequestTiming(
            sent_s=sent, chunk_times_s=tuple(chunks), end_s=end, output_tokens=int(output),
            prompt_tokens=int(prompt), ok=ok,
        ),
        error=error,
        cached_tokens=count("cache_n"),
        prompt_per_second=number("prompt_per_second"),
        predicted_per_second=number("predicted_per_second"),
        draft_n=count("draft_n"),
        draft_n_accepted=count("draft_n_accepted"),
        content="".join(parts),
    )


@dataclass
class LevelResult:
    samples: list[Sample]
    started_s: float
    ended_s: float

    @property
    def measured(self) -> list[Sample]:
        return [s for s in self.samples if not s.warmup]

    @property
    def duration_s(self) -> float:
        """First measured request sent to last measured response ended."""
        measured = self.measured
        if not measured:
            return max(self.ended_s - self.started_s, 1e-9)
        first = min(s.timing.sent_s for s in measured)
        last = max(s.timing.end_s for s in measured)
        return max(last - first, 1e-9)


ProgressFn = Callable[[int, int], None]


async def run_level(
    target: Target,
    *,
    prompts: Sequence[list[dict[str, str]]],
    output_tokens: int,
    concurrency: int | None = None,
    rate: float | None = None,
    warmup: int = 0,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> LevelResult:
    """Sends `warmup` requests (prompts[0:warmup], one at a time), then the rest under the load
    shape: exactly one of `concurrency` (requests in flight) or `rate` (Poisson, per second)."""
    if (concurrency is None) == (rate is None):
        raise ValueError("give exactly one of concurrency or rate")
    if concurrency is not None and concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if rate is not None and rate <= 0:
        raise ValueError("rate must be positive")
    total = len(prompts)
    done = 0
    samples: list[Sample] = []
    # llama-server drops idle keep-alive connections after 5 s; expire ours first (docs/performance.md).
    limits = httpx.Limits(max_connections=max(concurrency or 0, 64), max_keepalive_connections=64, keepalive_expiry=2.0)

    def finished(sample: Sample) -> None:
        nonlocal done
        samples.append(sample)
        done += 1
        if progress:
            progress(done, total)

    async with httpx.AsyncClient(limits=limits, timeout=target.timeout_s) as client:
        started = time.perf_counter()
        for index in range(min(warmup, total)):
            finished(await stream_one(client, target, messages=list(prompts[index]), output_tokens=output_tokens,
                                      index=index, warmup=True))
        queue = list(range(min(warmup, total), total))
        if concurrency is not None:
            pending = iter(queue)

            async def closed_loop_worker() -> None:
                for index in pending:  # a shared iterator: each index is taken once
                    finished(await stream_one(client, target, messages=list(prompts[index]),
                                              output_tokens=output_tokens, index=index, warmup=False))

            await asyncio.gather(*(closed_loop_worker() for _ in range(min(concurrency, max(len(queue), 1)))))
        else:
            assert rate is not None
            arrivals = random.Random(seed)
            tasks: list[asyncio.Task[None]] = []

            async def send(index: int) -> None:
                finished(await stream_one(client, target, messages=list(prompts[index]),
                                          output_tokens=output_tokens, index=index, warmup=False))

            for index in queue:
                tasks.append(asyncio.create_task(send(index)))
                await asyncio.sleep(arrivals.expovariate(rate))
            await asyncio.gather(*tasks)
        ended = time.perf_counter()
    samples.sort(key=lambda s: s.index)
    return LevelResult(samples=samples, started_s=started, ended_s=ended)


COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


async def count_prompt_tokens(target: Target, messages: list[dict[str, str]]) -> int:
    """The server's count of a chat prompt's tokens, chat template included, without generating:
    llama-server's native `/v1/messages/count_tokens` (the gateway relays it, so the same call
    works with a key), else llama-server's `/apply-template` then `/tokenize`. Neither runs the
    model, so a cold run's measured request stays the first generation the worker performs."""
    root = server_root(target.base_url)
    async with httpx.AsyncClient(timeout=min(target.timeout_s, 60.0)) as client:
        try:
            response = await client.post(root + COUNT_TOKENS_PATH, headers=target.headers(),
                                         json={"model": target.model, "messages": messages})
            if response.status_code == 200 and isinstance(response.json().get("input_tokens"), int):
                return int(response.json()["input_tokens"])
            refused = f"HTTP {response.status_code}: {response.text[:200]}"
            templated = await client.post(root + "/apply-template", headers=target.headers(),
                                          json={"messages": messages})
            if templated.status_code != 200:
                raise RuntimeError(f"could not count the prompt's tokens: {COUNT_TOKENS_PATH} {refused}")
            tokens = await client.post(root + "/tokenize", headers=target.headers(),
                                       json={"content": templated.json()["prompt"], "add_special": True,
                                             "parse_special": True})
            tokens.raise_for_status()
            return len(tokens.json()["tokens"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RuntimeError(f"could not count the prompt's tokens: {type(exc).__name__}: {exc}") from None


def fit_prompt_words(target: Target, *, prompt_tokens: int, seed: int = 0) -> tuple[int, int]:
    """Finds a word count whose prompt the server counts as close to `prompt_tokens` as possible
    (at most 6 counts, no generation); returns (words, the server's prompt tokens for it)."""
    words = max(prompt_tokens - 20, 1)
    best: tuple[int, int] | None = None
    tried: set[int] = set()
    for _ in range(6):
        tried.add(words)
        messages = [{"role": "user", "content": prompt_text(words=words, seed=seed)}]
        measured = asyncio.run(count_prompt_tokens(target, messages))
        if best is None or abs(measured - prompt_tokens) < abs(best[1] - prompt_tokens):
            best = (words, measured)
        if measured == prompt_tokens:
            break
        words = max(1, words + (prompt_tokens - measured))
        if words in tried:
            break
    assert best is not None
    return best
