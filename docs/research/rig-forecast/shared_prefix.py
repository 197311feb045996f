"""The rig forecast's shared system prompt (rig-forecast.md, "A system prompt shared by the class"):
for configurations A, B and C, the agents' TTFT p50 and p95, the turns they completed and the cache
share, with OCS_SHARED_PREFIX_K off and at 3, and the restores the simulation ran (own files
and, with k=3, shared ones).
The replay's students of one persona send the very same system prompt, so this is the most the
rule can give; a real client's prompt names the student's working directory early (the Copilot
CLI's after 5,573 characters), and only the blocks before it are shared. No database, as
slot_files.py (whose configurations these are).

    PYTHONPATH=. OCS_ENV=test .venv/bin/python docs/research/rig-forecast/shared_prefix.py
"""
from slot_files import RIGS, agents, run


OTHER_SEEDS = (("A", 8), ("B", 8), ("C", 16), ("C", 20))  # one seed's rows move by more than the effect


def row(name: str, students: int, seed: int) -> str:
    rig, workers, slots, context, _ = RIGS[name]
    line = []
    for k in (0, 3):
        result = run(rig, workers, slots, context, students, shared_prefix_k=k, seed=seed)
        p50 = result["p50"]
        line.append(f"k={k}: {'-' if p50 is None else f'{p50 / 1000:.1f} s'} / {agents(result)}, "
                    f"{result['completed']:.0f} turns, cache {result['cache']:.0%}, "
                    f"{result['tasks'].get('restore', 0)} restores")
    return f"{name} {workers}x{slots}, {students} students, seed {seed}: " + "; ".join(line)


def main() -> None:
    print("600 s simulated, slot files at the assumed 0.2 GB/s; agents' TTFT p50 / p95, turns completed, "
          "cache share")
    for name, (_, _, _, _, sizes) in RIGS.items():
        for students in sizes:
            print(row(name, students, 1), flush=True)
    for name, students in OTHER_SEEDS:
        for seed in (2, 3, 4):
            print(row(name, students, seed), flush=True)


if __name__ == "__main__":
    main()
