"""Every pass's ranking by agent p95 TTFT, judged two ways with the project's own check
(research.planner.compare.rank_configurations): the whole order (predicted == the runs' means'
order), and the orders the runs establish (pairs whose runs do not overlap) against the prediction.
Then the runs of passes 11 to 15 pooled per configuration (the same gateway code, class and seed;
only the planner changed between them): is 1x4 against 2x4 an order at all?

    PYTHONPATH=. .venv/bin/python docs/research/planner-validation/ranking_history.py
"""
import json
import re
from pathlib import Path

from research.planner.compare import Comparison, check_figure, rank_configurations

HERE = Path(__file__).parent
FIGURE = "agent TTFT p95"


def comparisons(path: Path) -> list[Comparison]:
    found = []
    for config in json.loads(path.read_text())["configurations"]:
        figure = next(f for f in config["figures"] if f["name"] == FIGURE)
        found.append(Comparison(label=config["label"], figures=(
            check_figure(FIGURE, figure["predicted_ms"], figure["measured_ms"]),)))
    return found


def order(pairs: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{low} < {high}" for low, high in pairs) or "none"


def history() -> None:
    def key(path: Path) -> tuple[int, str]:
        number = re.search(r"check-(\d+)", path.name)
        return (int(number.group(1)) if number else 0, path.name)

    print(f"{'file':<26}{'predicted':<18}{'measured':<18}{'whole order':<13}orders the runs establish")
    for path in sorted(HERE.glob("check*.json"), key=key):
        ranking = rank_configurations(comparisons(path))
        verdict = ("none contradicted" if not ranking.contradicted
                   else f"CONTRADICTED: {order(ranking.contradicted)}")
        print(f"{path.name:<26}{' < '.join(ranking.predicted):<18}{' < '.join(ranking.measured):<18}"
              f"{'same' if ranking.same else 'NOT same':<13}{order(ranking.resolved)} ({verdict})")


def pooled(tags: tuple[str, ...] = ("11", "12", "13", "14", "15")) -> None:
    print(f"\nagent TTFT p95 of every replay of passes {', '.join(tags)} (s), pooled per configuration:")
    runs = {}
    for config in ("1x4", "2x2", "2x4"):
        values = [json.loads(path.read_text())["agents"]["ttft_ms"]["p95"] / 1000
                  for tag in tags for path in sorted((HERE / config).glob(f"replay-{tag}-*.json"))]
        runs[config] = values
        mean = sum(values) / len(values)
        print(f"  {config}: {', '.join(f'{v:.2f}' for v in values)}; mean {mean:.2f}, "
              f"range {min(values):.2f}-{max(values):.2f}")
    mean = {config: sum(v) / len(v) for config, v in runs.items()}
    print(f"  1x4 against 2x4: means {mean['1x4']:.2f} and {mean['2x4']:.2f} ({mean['1x4'] / mean['2x4']:.2f}), "
          f"ranges {'overlap' if max(runs['1x4']) >= min(runs['2x4']) and max(runs['2x4']) >= min(runs['1x4']) else 'apart'}")


if __name__ == "__main__":
    history()
    pooled()
