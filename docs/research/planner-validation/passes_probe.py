"""How a step's forward passes cost (docs/research/planner-validation.md, "Tenth pass"). One
llama-server like the demo's workers (4 slots, a KV stream each: --no-kv-unified, 1 thread), the
pinned build. llama.cpp cuts a step's batch into passes (llama_batch_allocr::split_equal: slots of
consecutive ids, the same number of tokens of each), which the planner's step model follows
(research/planner/cost.py `ubatches`). Two experiments, each the same tokens in two layouts:

1. Prompt chunks: slots 1, 2, 3 hold a ~1,000-token prefix each, slot 0 keeps decoding (so the loop
   turns every ~15 ms and two requests sent at once join one step). 60 new tokens on slot 1 and 80
   on slot 2 (neighbours: shared passes, slot 2's chunk cut in three) against 60 on slot 1 and 80
   on slot 3 (apart: one pass each), and 80 on slot 2 alone. The median of the trials whose two
   prompts shared a step (the longer of the two prompt times, over 1 s).
2. Decode: slot 0 generating 96 tokens beside slot 1 (one pass) or slot 2 (two passes), the other
   slot's context short or ~1,000 tokens (cached), and slot 0 alone: slot 0's time per token.

    PYTHONPATH=. .venv/bin/python docs/research/planner-validation/passes_probe.py

The server is launched as the platform launches a worker (fleet.local_worker.LlamaServerSpec: its
isolation flags, a slot directory), with the pinned llama-server and the demo's model.
"""
import json, random, statistics, threading, time, urllib.request
from fleet.local_worker import LaunchOptions, LlamaServerProcess, LlamaServerSpec, find_default_model
server = LlamaServerProcess(LlamaServerSpec(model_path=find_default_model(), port=18555, context=4 * 4096, slots=4,
                                            options=LaunchOptions(threads=1))).start()
server.wait_healthy(timeout_s=120)
URL = server.spec.base_url
def post(path, body):
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)
rng = random.Random(7)
WORDS = "apple river stone cloud table green orange window silver garden music paper ocean yellow forest candle".split()
def text(n): return " ".join(rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(n))
def ntok(s): return len(post("/tokenize", {"content": s})["tokens"])
def sized(n):
    s = text(n)
    while ntok(s) > n: s = s[: int(len(s) * 0.97)]
    return s
def complete(slot, prompt, n_predict=1):
    return post("/completion", {"prompt": prompt, "n_predict": n_predict, "id_slot": slot, "cache_prompt": True,
                                "temperature": 0, "ignore_eos": True})
def at_once(jobs):
    out = {}
    def go(slot, prompt, n):
        out[slot] = complete(slot, prompt, n)["timings"]
    threads = [threading.Thread(target=go, args=job) for job in jobs]
    [t.start() for t in threads]; [t.join() for t in threads]
    return out

# 1. prompt chunks
prefix = {slot: sized(1000) for slot in (1, 2, 3)}
for slot in (1, 2, 3):
    complete(slot, prefix[slot])
stop = threading.Event()
def decoder():
    while not stop.is_set():
        try:
            complete(0, "Count slowly: one two three", n_predict=400)
        except Exception:
            return
threading.Thread(target=decoder, daemon=True).start()
time.sleep(2)
sizes = {1: 60, 2: 80, 3: 80}
chunks = {"neighbours 1+2": (1, 2), "apart 1+3": (1, 3), "slot 2 alone": (2,)}
rows = {case: [] for case in chunks}
for trial in range(12):
    for case, slots in chunks.items():
        out = at_once([(s, prefix[s] + " " + sized(sizes[s]), 1) for s in slots])
        rows[case].append((max(out[s]["prompt_ms"] for s in slots), [(out[s]["prompt_n"], out[s]["cache_n"]) for s in slots]))
        time.sleep(0.3)
stop.set()
print("1. prompt chunks beside a decoding slot 0: prompt ms (the longer of the two), 12 trials")
for case, got in rows.items():
    shared = [t for t, _ in got if len(chunks[case]) == 1 or t > 1000]
    print(f"  {case:15s} median {statistics.median(shared):5.0f} ms over {len(shared):2d} trials in one step; "
          f"all: {' '.join(f'{t:.0f}' for t, _ in got)}; (new tokens, cached) {got[0][1]}")
time.sleep(3)

# 2. decode
long_prefix = {slot: text(330) for slot in (1, 2)}
drows = {}
for trial in range(6):
    for case, other, long in (("neighbour short", 1, False), ("neighbour long", 1, True),
                              ("apart short", 2, False), ("apart long", 2, True), ("alone", None, False)):
        if long:  # the long prefix back in its slot (a short case there since has replaced it)
            complete(other, long_prefix[other], 1)
        jobs = [(0, "Write a list: " + text(5), 96)]
        if other is not None:
            jobs.append((other, (long_prefix[other] + " " + text(3)) if long else "Write a list: " + text(5), 96))
        out = at_once(jobs)
        drows.setdefault(case, []).append((out[0]["predicted_per_token_ms"],
                                           [(out[s]["prompt_n"], out[s]["cache_n"]) for s, _, _ in jobs]))
print("2. decode: slot 0's ms per token beside another slot generating, 6 trials")
for case, vals in drows.items():
    print(f"  {case:16s} median {statistics.median(v for v, _ in vals):5.1f} ms; "
          f"all: {' '.join(f'{v:.1f}' for v, _ in vals)}; (new tokens, cached) {vals[0][1]}")
server.stop()
