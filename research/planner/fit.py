"""Fitting a worker's cost model (research/planner/cost.py) to measured requests. Pure.

Input: the requests of benchmark runs of one worker (research.models.RequestSample, as
`Measured`), each with its run's concurrency. Three least-squares fits:

- **prompt evaluation**, from runs at concurrency 1 (nothing else in the loop), in relative terms
  (each request weighted by 1 / its TTFT):
  TTFT = request_overhead_s + prefill_s_per_token x n + prefill_s_per_context_token x n x (c + (n - 1) / 2)
  for n uncached tokens after c cached ones (cost.chunk_pairs): each new token also attends to
  the tokens before it. A prompt-size sweep spreads n; turns that find a long prefix cached
  (`bench --prefix-tokens`) spread c, which is what separates the context term from the rest.
  With three or more sizes of n after one cached prefix, the small-chunk term too
  (+ small_chunk_s_per_context_token x min(n, small_chunk_tokens) x c, for each forward pass of at
  most 512 tokens the prompt runs as: cost.ubatches): each size in
  SMALL_CHUNK_SIZES is tried, and the best is kept if it takes away a fifth of the squared residuals.
  Short chunks after a second, longer prefix tell that term (it grows with c) from the overhead.
  The residuals of cached and uncached turns are shown apart.
- **decode at batch 1**, from the runs at concurrency 1, each run's median TPOT against its
  requests' mean context while they generate (prompt + half the output):
  TPOT = decode_s_per_token + decode_s_per_context_token x context.
- **decode per extra slot**, from the runs at concurrency > 1: each run's median gap between
  streamed chunks (a decode step; the steps that also carry another request's prompt are the
  long gaps, which the median leaves out, as the simulator charges those prompts itself), less
  the batch-1 line at the batch's whole context, against batch - 1 (through the origin). Without
  the gaps a run's median TPOT stands in, and the other prompts' steps are folded into the slope.

**Jitter**, from the same runs at concurrency 1: each run sends identical requests, so the
relative standard deviation of their TTFTs is the worker's run-to-run noise; the root mean square
over the runs with two or more such requests (CostModel.jitter).

**Contention** (`fit_contention`), from runs of the same worker benched while the host's other
workers were benched at once (on the CPU demo they share its cores): each request's TTFT at
concurrency 1 and each run's decode step, measured, over what the cost model fitted alone
predicts for it; the median of those ratios, less 1, divided by the other workers computing,
is the slowdown per other worker (CostModel.contention). Their benches overlap for most of the
run, not all of it, so this is a lower bound of the slowdown while both compute.

Missing sweeps are said, not invented: with one prompt size the line goes through the origin
(no overhead); with every prompt at the same cached context the context term comes from the
spread of n alone (the curvature of the sweep); with one context at batch 1 the decode context
term is 0; with one concurrency the slope per extra slot is 0. A term that comes out negative
is set to 0 and the rest refitted, with a note.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from research.planner.cost import DEFAULT_BATCH_TOKENS, CostModel, chunk_pairs, lone_pieces, small_chunk_pairs


@dataclass(frozen=True)
class Measured:
    """One measured request: its run, the run's concurrency, tokens, and times in seconds."""

    run_id: int
    concurrency: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    ttft_s: float | None
    tpot_s: float | None
    step_s: float | None = None  # the median gap between its streamed chunks, if known

    @property
    def uncached_tokens(self) -> int:
        return max(self.prompt_tokens - self.cached_tokens, 0)


@dataclass
class Fit:
    cost: CostModel
    prefill_points: int
    decode_points: int
    residuals: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of y = intercept + slope x; through the origin when the x do not vary."""
    if not points:
        raise ValueError("no points to fit")
    xs = [x for x, _ in points]
    if max(xs) - min(xs) <= 0:
        x0 = xs[0]
        mean_y = statistics.fmean(y for _, y in points)
        return 0.0, (mean_y / x0 if x0 else 0.0)
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in points)
             / sum((x - mean_x) ** 2 for x in xs))
    return mean_y - slope * mean_x, slope


def solve_least_squares(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float] | None:
    """Coefficients minimising sum (row . coef - y)^2 (normal equations, Gaussian elimination);
    None when the columns are not independent (a term the data cannot tell apart)."""
    k = len(rows[0]) if rows else 0
    if not rows or len(rows) < k:
        return None
    scale = [max(abs(row[j]) for row in rows) or 1.0 for j in range(k)]
    a = [[sum(row[i] * row[j] / (scale[i] * scale[j]) for row in rows) for j in range(k)]
         + [sum(row[i] * y / scale[i] for row, y in zip(rows, ys))] for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-9 * max(1.0, max(abs(a[i][i]) for i in range(k))):
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(k):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col])]
    return [a[i][k] / a[i][i] / scale[i] for i in range(k)]


def through_origin(points: Sequence[tuple[float, float]]) -> float:
    squares = sum(x * x for x, _ in points)
    return sum(x * y for x, y in points) / squares if squares else 0.0


def _summary(errors: Sequence[float], observed: Sequence[float]) -> dict[str, float | None]:
    if not errors:
        return {"n": 0, "rms_s": None, "max_abs_s": None, "max_relative": None}
    relative = [abs(e) / o for e, o in zip(errors, observed) if o]
    return {"n": len(errors), "rms_s": (sum(e * e for e in errors) / len(errors)) ** 0.5,
            "max_abs_s": max(abs(e) for e in errors), "max_relative": max(relative) if relative else None}


@dataclass(frozen=True)
class _Prefill:
    """A prompt line: its terms (seconds) and its squared relative residuals over the points."""

    overhead: float
    token: float
    context: float
    small: float = 0.0
    small_tokens: int = 0
    squares: float = 0.0


# Sizes tried for the small-chunk term (CostModel.small_chunk_tokens), and how much of the squared
# residuals the best of them must leave at most to be kept (else the term is noise: 0).
SMALL_CHUNK_SIZES = (16, 32, 64, 128)
SMALL_CHUNK_GAIN = 0.8
SMALL_CHUNK_RUNS = 3  # chunk sizes after one cached prefix that can tell the term apart
SMALL_CHUNK_PREFIX = 128  # a prefix this long at least (not the template's default system prompt)


def _fit_prefill(points: Sequence[tuple[int, int, float]], notes: list[str], small_tokens: int = 0) -> _Prefill | None:
    """The prompt line from (uncached, cached, TTFT) points; with `small_tokens`, the small-chunk
    term at that size too (None when it comes out <= 0 or cannot be told apart)."""
    terms = ["overhead", "token", "context"] + (["small"] if small_tokens else [])
    if len({n for n, _, _ in points}) < 2:
        notes.append("one prompt size only: no request overhead fitted (the line goes through the origin)")
        terms.remove("overhead")

    def row(n: int, c: int) -> list[float]:
        # a prompt longer than a ubatch runs as several forward passes, each paying the small-chunk term
        small = sum(small_chunk_pairs(p.tokens, p.context, small_tokens) for p in lone_pieces(n, c))
        return [{"overhead": 1.0, "token": float(n), "context": chunk_pairs(n, c), "small": small}[t] for t in terms]

    # Relative least squares (each point weighted by 1 / its TTFT): a 200 ms turn's error counts as
    # much as a 4 s prompt's of the same share, as the planner is judged (and a line fitted in
    # seconds let the long prompts set it: the agents' short turns came out 10-16 % fast).
    weights = [1.0 / y if y > 0 else 1.0 for _, _, y in points]
    while True:
        coef = solve_least_squares([[x * w for x in row(n, c)] for (n, c, _), w in zip(points, weights)],
                                   [y * w for (_, _, y), w in zip(points, weights)])
        if coef is None and "small" in terms:
            return None
        if coef is None and "context" in terms:
            notes.append("prefill_s_per_context_token not fitted (0): the runs do not separate it from the rest")
            terms.remove("context")
            continue
        if coef is None:
            per = max(through_origin([(float(n), y) for n, _, y in points]), 0.0)
            return _Prefill(0.0, per, 0.0,
                            squares=sum(((y - per * n) * w) ** 2 for (n, _, y), w in zip(points, weights)))
        values = dict(zip(terms, coef))
        if "small" in terms and values["small"] <= 0:
            return None
        if values.get("context", 0.0) < 0:
            notes.append(f"prefill time per context token came out {values['context'] * 1e6:.3f} us: set to 0")
            terms.remove("context")
            continue
        if values.get("overhead", 0.0) < 0:
            notes.append(f"the prompt line's intercept came out {values['overhead']:.4f} s: "
                         "refitted through the origin")
            terms.remove("overhead")
            continue
        if values.get("token", 0.0) <= 0:
            raise ValueError("the prompt line's time per token came out <= 0: the runs' TTFTs do not fit a line")
        squares = sum(((y - sum(v * x for v, x in zip(coef, row(n, c)))) * w) ** 2
                      for (n, c, y), w in zip(points, weights))
        return _Prefill(values.get("overhead", 0.0), values["token"], values.get("context", 0.0),
                        values.get("small", 0.0), small_tokens if "small" in terms else 0, squares)


def _fit_prompt(points: Sequence[tuple[int, int, float]], notes: list[str]) -> _Prefill:
    """The prompt line, with the small-chunk term at the size that fits best when the runs can
    tell it apart (chunks of several sizes after one cached prefix) and it takes away at least a
    fifth of the squared residuals."""
    base_notes: list[str] = []
    base = _fit_prefill(points, base_notes)
    assert base is not None  # without the small term the line always comes out (or raises)
    chosen, chosen_notes = base, base_notes
    sizes_after_prefix: defaultdict[int, set[int]] = defaultdict(set)
    for n, c, _ in points:
        if c >= SMALL_CHUNK_PREFIX:
            sizes_after_prefix[c // 64].add(n)  # "one cached prefix": the same 64-token band of c
    if any(len(sizes) >= SMALL_CHUNK_RUNS for sizes in sizes_after_prefix.values()):
        best: tuple[_Prefill, list[str]] | None = None
        for size in SMALL_CHUNK_SIZES:
            trial_notes: list[str] = []
            trial = _fit_prefill(points, trial_notes, size)
            if trial is not None and (best is None or trial.squares < best[0].squares):
                best = trial, trial_notes
        if best is not None and best[0].squares < SMALL_CHUNK_GAIN * base.squares:
            chosen, chosen_notes = best
    elif sizes_after_prefix:
        base_notes.append(f"fewer than {SMALL_CHUNK_RUNS} prompt sizes after one cached prefix: no small-chunk "
                          "term (bench --prefix-tokens 512 with 16 to 256 tokens after it, and 1280 with 16 and 64)")
    notes.extend(chosen_notes)
    return chosen


def fit_cost_model(measured: Sequence[Measured], *, slots: int, batch_tokens: int = DEFAULT_BATCH_TOKENS,
                   cache_type: str = "f16") -> Fit:
    """The cost model that best fits `measured` (module docstring); raises ValueError when the
    requests hold neither a TTFT at concurrency 1 nor a TPOT."""
    notes: list[str] = []
    prefill = [m for m in measured if m.concurrency <= 1 and m.ttft_s is not None]
    points = [(m.uncached_tokens, m.cached_tokens, float(m.ttft_s)) for m in prefill if m.ttft_s is not None]
    if not points:
        raise ValueError("no request with a TTFT at concurrency 1: run a prompt-size sweep (bench at concurrency 1)")
    decode_points = decode_steps(measured, slots=slots)
    if not decode_points:
        raise ValueError("no request with a TPOT (output tokens > 1): runs need at least 2 output tokens")
    single = [(context, step) for _, batch, context, step in decode_points if batch == 1]
    if not single:
        notes.append("no run at concurrency 1 with a TPOT: the decode line starts from the lowest batch")
        low = min(batch for _, batch, _, _ in decode_points)
        single = [(context, step) for _, batch, context, step in decode_points if batch == low]
    base, per_context_decode = least_squares(single)
    if len({round(context) for context, _ in single}) < 2:
        notes.append("one context at batch 1 only: decode_s_per_context_token set to 0 (run a prompt-size sweep "
                     "with more than one output token)")
        base, per_context_decode = statistics.fmean(step for _, step in single), 0.0
    if per_context_decode < 0:
        notes.append(f"decode time per context token came out {per_context_decode * 1e6:.3f} us: set to 0")
        base, per_context_decode = statistics.fmean(step for _, step in single), 0.0
    if base <= 0:
        raise ValueError("the decode line's time per token came out <= 0: the runs' TPOTs do not fit a line")
    batched = [(float(batch - 1), step - base - per_context_decode * batch * context)
               for _, batch, context, step in decode_points if batch > 1]
    extra = through_origin(batched) if batched else 0.0
    if not batched:
        notes.append("one batch size only: decode_s_per_extra_slot set to 0 (run a concurrency sweep)")
    if extra < 0:
        notes.append(f"decode time per extra slot came out {extra:.5f} s: set to 0")
        extra = 0.0
    # A forward pass's own cost (CostModel.pass_s): a one-slot decode step less what one more slot
    # adds to it. A prompt longer than a ubatch runs as several passes; each after the first costs
    # that, taken off before the prompt line is fitted.
    pass_s = max(0.0, base - extra)
    points = [(n, c, y - pass_s * (len(lone_pieces(n, c)) - 1)) for n, c, y in points]
    prompt = _fit_prompt(points, notes)
    if len({c for _, c, _ in points}) < 2 and prompt.context:
        notes.append("every prompt found the same cached context: the context term rests on the sweep's curvature "
                     "alone (run bench --prefix-tokens)")

    jitter, spreads = _jitter(prefill)
    if not spreads:
        notes.append("no run at concurrency 1 with two or more requests: jitter 0 (bench --requests 3)")
    cost = CostModel(prefill_s_per_token=prompt.token, decode_s_per_token=base, decode_s_per_extra_slot=extra,
                     decode_s_per_context_token=per_context_decode, request_overhead_s=prompt.overhead,
                     prefill_s_per_context_token=prompt.context, batch_tokens=batch_tokens, cache_type=cache_type,
                     jitter=jitter, small_chunk_tokens=prompt.small_tokens,
                     small_chunk_s_per_context_token=prompt.small, pass_s=pass_s)

    def predicted_ttft(m: Measured) -> float:
        return cost.ttft_alone_s(m.uncached_tokens, m.cached_tokens)

    def predicted_step(batch: int, context: float) -> float:
        return cost.decode_s(batch, round(batch * context))

    cached = [m for m in prefill if m.cached_tokens > 0]
    uncached = [m for m in prefill if m.cached_tokens <= 0]
    residuals: dict[str, Any] = {
        "ttft": _summary([float(m.ttft_s or 0) - predicted_ttft(m) for m in prefill],
                         [float(m.ttft_s or 0) for m in prefill]),
        "ttft_cached": _summary([float(m.ttft_s or 0) - predicted_ttft(m) for m in cached],
                                [float(m.ttft_s or 0) for m in cached]),
        "ttft_uncached": _summary([float(m.ttft_s or 0) - predicted_ttft(m) for m in uncached],
                                  [float(m.ttft_s or 0) for m in uncached]),
        "ttft_by_run": _ttft_by_run(prefill, predicted_ttft),
        "tpot": _summary([step - predicted_step(batch, context) for _, batch, context, step in decode_points],
                         [step for _, _, _, step in decode_points]),
        "tpot_by_run": [{"run": run_id, "batch": batch, "context": context, "observed_s": step,
                         "predicted_s": predicted_step(batch, context)}
                        for run_id, batch, context, step in decode_points],
        "jitter_by_run": spreads,
    }
    return Fit(cost=cost, prefill_points=len(points), decode_points=len(decode_points), residuals=residuals,
               notes=notes)


def _by_run(measured: Iterable[Measured]) -> list[tuple[int, list[Measured]]]:
    """The requests grouped by their run, in run order."""
    groups: dict[int, list[Measured]] = defaultdict(list)
    for m in measured:
        groups[m.run_id].append(m)
    return sorted(groups.items())


def decode_steps(measured: Sequence[Measured], *, slots: int) -> list[tuple[int, int, float, float]]:
    """Per run with a TPOT: (run, batch, context per generating slot, the run's decode step: its
    median TPOT at batch 1, its median gap between streamed chunks above)."""
    points = []
    for run_id, requests in _by_run(m for m in measured if m.tpot_s is not None):
        batch = max(1, min(requests[0].concurrency, slots))
        context = statistics.fmean(m.prompt_tokens + m.output_tokens / 2 for m in requests)
        steps = [m.step_s for m in requests if m.step_s is not None]
        tpot = statistics.median(m.tpot_s for m in requests if m.tpot_s is not None)
        points.append((run_id, batch, context, statistics.median(steps) if batch > 1 and steps else tpot))
    return points


def _jitter(prefill: Sequence[Measured]) -> tuple[float, list[dict[str, Any]]]:
    """(RMS of the runs' relative TTFT spreads, each run's) over runs at concurrency 1 whose
    requests were identical (one prompt size and cached prefix: a bench run's) and number >= 2."""
    spreads = []
    for run_id, rows in _by_run(prefill):
        ttfts = [float(m.ttft_s) for m in rows if m.ttft_s]
        if len(ttfts) < 2 or len({(m.prompt_tokens, m.cached_tokens) for m in rows}) > 1:
            continue
        spreads.append({"run": run_id, "requests": len(ttfts),
                        "relative_sd": statistics.stdev(ttfts) / statistics.fmean(ttfts)})
    if not spreads:
        return 0.0, []
    return (statistics.fmean(row["relative_sd"] ** 2 for row in spreads)) ** 0.5, spreads


def _ttft_by_run(prefill: Sequence[Measured], predicted: Any) -> list[dict[str, Any]]:
    return [{"run": run_id, "uncached": statistics.fmean(m.uncached_tokens for m in rows),
             "cached": statistics.fmean(m.cached_tokens for m in rows),
             "observed_s": statistics.median(float(m.ttft_s or 0) for m in rows),
             "predicted_s": statistics.median(predicted(m) for m in rows)}
            for run_id, rows in _by_run(prefill)]


def fit_contention(alone: CostModel, loaded: Sequence[Measured], *, slots: int,
                   others: int) -> tuple[float, dict[str, Any], list[str]]:
    """The slowdown per other worker computing (module docstring), its basis and notes, from the
    requests of `loaded` runs, measured while `others` other workers of the host were benched
    at once; `alone` is the cost model fitted to the same worker's runs alone."""
    if others < 1:
        raise ValueError("contention needs runs measured beside at least one other worker")
    ttft = [float(m.ttft_s) / alone.ttft_alone_s(m.uncached_tokens, m.cached_tokens)
            for m in loaded if m.concurrency <= 1 and m.ttft_s]
    decode = [step / alone.decode_s(batch, round(batch * context))
              for _, batch, context, step in decode_steps(loaded, slots=slots)]
    ratios = ttft + decode
    if not ratios:
        raise ValueError("the loaded runs hold no TTFT at concurrency 1 and no TPOT to compare with the worker alone")
    notes: list[str] = []
    ratio = statistics.median(ratios)
    contention = (ratio - 1) / others
    if contention < 0:
        notes.append(f"the worker was {1 - ratio:.1%} faster beside the others than alone: contention set to 0")
        contention = 0.0
    basis = {"others": others, "ratio": ratio, "ttft_points": len(ttft), "decode_runs": len(decode),
             "ttft_ratio": statistics.median(ttft) if ttft else None,
             "decode_ratio": statistics.median(decode) if decode else None}
    return contention, basis, notes


@dataclass(frozen=True)
class SlotFileSample:
    """One slot file task timed by llama-server itself: `kind` ("save" or "restore"), the tokens
    the file held, and the seconds the task took in the loop's thread (its `timings`)."""

    kind: str
    tokens: int
    seconds: float


def fit_slot_files(samples: Sequence[SlotFileSample]) -> tuple[float, float, dict[str, Any]]:
    """Seconds per token of a save and of a restore (CostModel.slot_save_s_per_token,
    slot_restore_s_per_token), each a line through the origin over its samples (a file is the
    slot's KV, so its size and the time to write or read it grow with its tokens), and the basis:
    per kind the samples, the tokens' range, and the worst relative residual."""
    rates: dict[str, float] = {}
    basis: dict[str, Any] = {}
    for kind in ("save", "restore"):
        points = [(float(s.tokens), s.seconds) for s in samples if s.kind == kind and s.tokens > 0 and s.seconds >= 0]
        if not points:
            raise ValueError(f"no {kind} of a slot holding tokens was timed: slot file costs cannot be fitted")
        rate = through_origin(points)
        rates[kind] = rate
        basis[kind] = {"n": len(points), "tokens": [int(min(x for x, _ in points)), int(max(x for x, _ in points))],
                       "s_per_token": rate,
                       "max_relative": max(abs(y - rate * x) / y for x, y in points if y > 0) if any(
                           y > 0 for _, y in points) else None}
    return rates["save"], rates["restore"], basis
