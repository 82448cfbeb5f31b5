"""The shipped Sudoku solvers against the reference-model targets (issue 12), read from their results.json.

    .venv/bin/python benchmarks/solver_targets.py            # markdown table for benchmarks/RESULTS.md

Nothing is measured here: each card's numbers were measured when it was shipped (`jacobiscope sudoku eval` through
`jacobiscope.recipes.shipping`); this script only compares them with the targets, so the table cannot drift from
the cards.
"""
from __future__ import annotations

import json

from jacobiscope.hub import shipped_checkpoints

# name -> [(what, split, loop counts ("best" = the best of the card's), votes, threshold)]
TARGETS = {
    "itrsa-sudoku": [("SATNet ID at T=32", "id", ["32"], 1, 0.99), ("RRN at its best T", "ood", "best", 1, 0.344)],
    "akorn-sudoku": [("SATNet ID at its best T", "id", "best", 1, 0.99), ("RRN at T=128", "ood", ["128"], 1, 0.517)],
    "itrsa-sudoku-general": [("fresh 31-42 givens at its best T", "fresh", "best", 1, 0.95),
                             ("RRN at its best T", "ood", "best", 1, 0.60)],
    "akorn-sudoku-general": [("fresh 31-42 givens at its best T", "fresh", "best", 1, 0.95),
                             ("RRN at its best T", "ood", "best", 1, 0.60)],
}


def _accuracy(results: dict, split: str, loops, votes: int) -> tuple[float, str]:
    per_loop = results[split][f"votes={votes}"]
    counts = list(per_loop) if loops == "best" else loops
    best = max(counts, key=lambda t: per_loop[t]["board_accuracy"])
    return per_loop[best]["board_accuracy"], best


def _monotone(results: dict) -> str:
    """Non-decreasing from T=16 on (within 1 point), over every split and odd T alike."""
    worst = 0.0
    for split in ("id", "ood", "fresh"):
        per_loop = results.get(split, {}).get("votes=1", {})
        values = [per_loop[t]["board_accuracy"] for t in sorted(per_loop, key=int) if int(t) >= 16]
        worst = max([worst] + [a - b for i, a in enumerate(values) for b in values[i + 1:]])
    return "yes" if worst <= 0.01 + 1e-9 else f"no (drops {100 * worst:.1f} points)"  # 1 point, up to rounding


def table() -> str:
    rows = ["| checkpoint | target | measured | met | RRN rows | non-decreasing in T (odd T too) |",
            "|---|---|---|---|---|---|"]
    shipped = shipped_checkpoints()
    for name, targets in TARGETS.items():
        if name not in shipped:
            rows.append(f"| `{name}` | not shipped yet | | | | |")
            continue
        results = json.loads((shipped[name] / "results.json").read_text())
        for what, split, loops, votes, threshold in targets:
            value, at = _accuracy(results, split, loops, votes)
            rows.append(f"| `{name}` | {what} >= {100 * threshold:.1f}% | {100 * value:.1f}% (T={at}) | "
                        f"{'yes' if value >= threshold else 'no'} | {results.get('ood_rows', '-')} | "
                        f"{_monotone(results)} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
