"""After the eighth pass: where a turn's time to first token goes, simulated against measured, per
persona (docs/research/planner-validation.md, "Eighth pass"). A turn's TTFT is split in three:
the line (the gateway's queue wait), the handover (from leaving the line until llama-server starts
the prompt: the request's overhead, the slot file save and restore, which wait for step
boundaries, and the wait for the step in progress), and the prompt (llama-server's own prompt
time, from the step that takes its first chunk to its first token: prompt tokens not cached over
`timings.prompt_per_second`; simulated: the same two instants).
Simulated: the pass's own cost model (plan.json), four noisy runs; measured: both replays, from the
request log of the configuration's database (the replays labelled `... run N`, not a warm-up).
p50 and p90 in ms.

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/planner-validation/decompose.py 1x4 /tmp/p8
"""
import json, os, sys, sqlite3
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ocsweb.settings")
import django; django.setup()
from dataclasses import replace
from research.planner import sim as S
from research.planner.plan import plan_from_report
from research.planner.workload import class_students
from research.metrics import percentile  # the replay's own p50 / p95
cfg, base = sys.argv[1], sys.argv[2]
plan, cost = plan_from_report(json.load(open(f"{base}/validation/{cfg}/plan.json"))["rows"][0]["report"])
fleet = plan.fleet
loop = {}
orig = S.Simulation._enter_loop
def enter(self, request):
    loop.setdefault(request.id, self.now); return orig(self, request)
S.Simulation._enter_loop = enter
started = {}  # request id -> when its first prompt chunk's step began (llama-server's prompt timer starts)
orig_step = S.Simulation._begin_step
def begin_step(self, worker):
    orig_step(self, worker)
    for request, chunk in (worker.step if worker.stepping else []):
        if chunk > 0:
            started.setdefault(request.id, self.now)
S.Simulation._begin_step = begin_step
def q(xs, p): return round(percentile(xs, p * 100)) if xs else None
rows={}
computed = {"simulated": [], "measured": []}  # prompt tokens each turn computed (not found cached)
for seed in range(4):
    students = class_students(mix=plan.mix, seed=plan.seed, scale=plan.scale, context_tokens=fleet.context_tokens,
                              duration_s=fleet.duration_s, tools_inline=plan.tools_inline, model=fleet.model_id,
                              tokens=cost.tokens)
    loop.clear(); started.clear()  # request ids repeat from one run to the next
    sim = S.Simulation(plan=replace(fleet, noise_seed=1000+seed), costs=[cost] * fleet.workers, students=students)
    sim.run()
    for r in sim.requests.values():
        if r.first_token_s is None or r.claimed_s is None: continue
        per = r.student.persona
        computed["simulated"].append(r.shape.prompt_tokens - r.reused)
        rows.setdefault(per, []).append(((r.claimed_s-r.sent_s)*1000, (started[r.id]-r.claimed_s)*1000, (r.first_token_s-started[r.id])*1000, (r.first_token_s-r.sent_s)*1000))
print(f"{cfg} simulated (4 noisy runs): persona, turns, (p50, p90) of line | handover | prompt | TTFT")
for per, xs in sorted(rows.items()):
    print(per, len(xs), *[ (q([x[i] for x in xs],.5), q([x[i] for x in xs],.9)) for i in range(4)])
db=sqlite3.connect(f"{base}/var/{cfg}/ocs.sqlite3")
m=db.execute("""select u.username, r.prompt_tokens, r.cached_tokens, r.queue_wait_ms, r.ttft_ms, r.prompt_tokens_per_s
from inference_requestlog r join accounts_user u on u.id=r.user_id where r.status=200 and u.username like 'replay-%' and r.ttft_ms is not null
and r.at >= coalesce((select min(started_at) from research_benchmarkrun where kind='class-replay' and label like '% run %'), '')""").fetchall()
print(f"{cfg} measured (the measured replays; a warm-up replay left out)")
for per in ["agent","burst","chat","claude","codex"]:
    xs=[]
    for u,p,cc,qq,t,pps in m:
        if per not in u: continue
        pm=(p-cc)/pps*1000 if pps else 0
        computed["measured"].append(p-cc)
        xs.append((qq, t-qq-pm, pm, t))
    print(per, len(xs), *[(q([x[i] for x in xs],.5), q([x[i] for x in xs],.9)) for i in range(4)])
for side, xs in computed.items():  # the work the turns brought, whatever the loop made of it
    print(f"{cfg} {side}: prompt tokens computed a turn p50 {q(xs,.5)}, p90 {q(xs,.9)}, p99 {q(xs,.99)}, "
          f"max {max(xs)} ({len(xs)} turns)")
