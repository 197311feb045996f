"""What a slot file's save and restore cost a llama-server of the demo's model when nothing else runs
(docs/research/planner-validation.md, "Eighth pass"): a conversation of ~690 and ~1,620 tokens is
computed in slot 0, saved, and restored into slot 1, three times; llama-server's own `save_ms` and
`restore_ms`, the HTTP round trip and the file's size. The simulator takes both as free.

    llama-server -m SmolLM2-135M-Instruct.Q4_1.gguf --port 8798 -c 8192 --parallel 2 --threads 1 \
        --slot-save-path /tmp/slots/ --cache-ram 0 &
    python3 docs/research/planner-validation/slot_file_io.py > docs/research/planner-validation/slot-file-io.txt
"""
import json
import time
import urllib.request


def post(path: str, body: dict) -> tuple[dict, float]:
    request = urllib.request.Request("http://127.0.0.1:8798" + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    start = time.time()
    answer = json.load(urllib.request.urlopen(request))
    return answer, (time.time() - start) * 1000


for n in (600, 1300):
    prompt = " ".join(f"word{i}" for i in range(n // 3))
    out, _ = post("/completion", {"prompt": prompt, "n_predict": 1, "id_slot": 0, "cache_prompt": True})
    print(f"{out.get('tokens_evaluated')} tokens in slot 0 (prefill {out['timings']['prompt_ms']:.0f} ms)")
    for _ in range(3):
        saved, save_http = post("/slots/0?action=save", {"filename": f"s{n}.bin"})
        restored, restore_http = post("/slots/1?action=restore", {"filename": f"s{n}.bin"})
        print(f"  save {saved['timings']['save_ms']:.1f} ms ({save_http:.0f} ms HTTP), "
              f"restore {restored['timings']['restore_ms']:.1f} ms ({restore_http:.0f} ms HTTP), "
              f"{saved['n_written'] / 1e6:.1f} MB")
