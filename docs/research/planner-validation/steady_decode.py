"""How steady is this machine (docs/research/planner-validation.md, "Eleventh pass")? One
llama-server like the demo's workers (4 slots, 1 thread, launched as the platform launches one), the
same request again and again for DURATION seconds (default 180) with nothing else running: a short
prompt, 200 tokens generated, always slot 0. Prints each request's seconds since the start and its
milliseconds a generated token (llama-server's own timings).

    PYTHONPATH=. .venv/bin/python docs/research/planner-validation/steady_decode.py [DURATION] > steady-decode.txt
"""
import json, sys, time, urllib.request
from fleet.local_worker import LaunchOptions, LlamaServerProcess, LlamaServerSpec, find_default_model
duration = float(sys.argv[1]) if len(sys.argv) > 1 else 180
server = LlamaServerProcess(LlamaServerSpec(model_path=find_default_model(), port=18556, context=4 * 4096, slots=4,
                                            options=LaunchOptions(threads=1))).start()
server.wait_healthy(timeout_s=120)
try:
    t0 = time.time()
    while time.time() - t0 < duration:
        body = {"prompt": "Count slowly: one two three", "n_predict": 200, "id_slot": 0, "cache_prompt": True,
                "temperature": 0, "ignore_eos": True}
        req = urllib.request.Request(server.spec.base_url + "/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            t = json.load(r)["timings"]
        print(f"{time.time() - t0:6.1f} {t['predicted_per_token_ms']:.2f}", flush=True)
finally:
    server.stop()
