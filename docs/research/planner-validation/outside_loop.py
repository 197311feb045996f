"""After the fourteenth pass: how long a request spends outside llama-server's loop, measured
directly from the benches: each request's TTFT (the client's) less llama-server's own prompt time
(the tokens it computed over `timings.prompt_per_second`), per bench run at concurrency 1 of
worker 1 alone, from a pass's databases. Set beside the prompt line's fitted intercept
(`request overhead` in <config>/calibration-N.txt): docs/research/planner-validation.md,
"Fourteenth pass".

    python3 docs/research/planner-validation/outside_loop.py /tmp/p14/var
"""
import sqlite3
import statistics
import sys

for cfg in ("1x4", "2x2", "2x4"):
    db = sqlite3.connect(f"{sys.argv[1]}/{cfg}/ocs.sqlite3")
    rows = db.execute("""select b.label, s.ttft_ms, s.prompt_tokens, s.cached_tokens, s.prompt_per_second
    from research_requestsample s join research_benchmarkrun b on b.id = s.run_id
    where b.concurrency = 1 and s.warmup = 0 and s.ok = 1 and s.ttft_ms is not null
    and s.prompt_per_second is not null and b.label like '%alone%'""").fetchall()
    by_run: dict[str, list[float]] = {}
    for label, ttft, prompt, cached, rate in rows:
        by_run.setdefault(label.split("alone ")[-1], []).append(ttft - (prompt - (cached or 0)) / rate * 1000)
    for run, outside in by_run.items():
        print(f"{cfg} {run:38s} TTFT less the server's prompt time: {', '.join(f'{v:.1f}' for v in outside)} ms")
    every = [v for values in by_run.values() for v in values]
    print(f"{cfg} median over {len(every)} requests: {statistics.median(every):.1f} ms\n")
