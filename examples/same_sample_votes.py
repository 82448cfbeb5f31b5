"""Put one vote on the same puzzles beside every voted row of the shipped cards (issue 35: no card line that mixes
samples). A card measured votes=K on the first 200 puzzles of each split and votes=1 on all of them; this adds
votes=1 on those same first 200 (``results[split]["votes=1 first=200"]``) and rewrites the card's tables; every
solver card's tables then get their 95% Wilson interval line (`refresh_accuracy_tables`).

    OMP_NUM_THREADS=1 .venv/bin/python examples/same_sample_votes.py            # every card with voted rows

New cards get the row when they are measured (`jacobiscope.recipes.shipping.measure_checkpoint`). Both files are
replaced atomically; the other fields stay as they were.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _split_puzzles(split: str, count: int, results: dict):
    from jacobiscope.data import sudoku
    from jacobiscope.recipes.shipping import FRESH_GIVENS, FRESH_SEED

    if split == "id":
        dataset = sudoku.satnet_splits()[1].select(range(count))
    elif split == "ood":
        dataset = sudoku.rrn_test(limit=count)
    else:  # the card's fresh puzzles: its generator call, then the first `count` of them
        total = int(results["fresh_rows"].split(" ", 1)[0])
        dataset = sudoku.to_dataset(*sudoku.generate_many(total, givens=FRESH_GIVENS, seed=FRESH_SEED))
        dataset = dataset.select(range(count))
    return sudoku.to_tensor(list(dataset["puzzle"])), sudoku.to_tensor(list(dataset["solution"]))


def add_rows(name: str, folder: Path) -> list[str]:
    import jacobiscope
    from jacobiscope._io import atomic_write_text
    from jacobiscope.recipes.shipping import _scored, _table, same_sample_key
    from jacobiscope.recipes.sudoku import evaluate_sudoku

    results = json.loads((folder / "results.json").read_text())
    card = (folder / "README.md").read_text()
    model, added = None, []
    for split in ("id", "ood", "fresh"):
        rows = results.get(split, {})
        voted = [key for key in rows if key != "votes=1" and " " not in key]
        if not voted:
            continue
        count = next(iter(rows[voted[0]].values()))["puzzles"]
        key = same_sample_key(count)
        if key in rows:
            continue
        model = model or jacobiscope.load_pretrained(name).eval()
        puzzles, solutions = _split_puzzles(split, count, results)
        loops = [int(t) for t in rows["votes=1"]]
        old_table = _table(results, split)
        ordered = {"votes=1": rows["votes=1"], key: _scored(evaluate_sudoku(model, puzzles, solutions, loops=loops,
                                                                            votes=1), count)}
        ordered.update({k: v for k, v in rows.items() if k not in ordered})
        results[split] = ordered
        if old_table not in card:
            raise SystemExit(f"{folder / 'README.md'}: its {split} table is not the one results.json renders; re-ship")
        card = card.replace(old_table, _table(results, split))
        added.append(f"{split}: one vote on the first {count}: " + " / ".join(
            f"{100 * v['board_accuracy']:.1f}" for v in ordered[key].values()))
    if added:
        atomic_write_text(folder / "results.json", json.dumps(results, indent=1))
        atomic_write_text(folder / "README.md", card)
    return added


def main() -> None:
    from jacobiscope.hub import shipped_checkpoints

    torch.set_num_threads(1)
    from jacobiscope.recipes.shipping import refresh_accuracy_tables

    for name, folder in sorted(shipped_checkpoints().items()):
        if (folder / "results.json").is_file() and "loops_trained" in json.loads((folder / "results.json").read_text()):
            for line in add_rows(name, folder):
                print(f"{name} {line}", flush=True)
            if refresh_accuracy_tables(folder):
                print(f"{name}: interval lines written", flush=True)


if __name__ == "__main__":
    main()
