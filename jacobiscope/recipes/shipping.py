"""Turn a trained Sudoku run into a published checkpoint folder: weights, config, measured results, and a model card
written from those measurements. The folder carries no Python code (the package registers its models with
``AutoModel``); `jacobiscope.hub.prepare_for_hub` writes the code and ``auto_map`` into a copy for a Hub upload."""
from __future__ import annotations

import json
import platform
import shutil
import time
from pathlib import Path

import torch

from .._io import atomic_write_text
from ._card_files import read_shipped_card
from ._scaling import scaling_section
from ._sudoku_dynamics import dynamics_section, measure_dynamics

__all__ = ["measure_checkpoint", "write_model_card", "ship_checkpoint", "refresh_scaling_section", "CHECK_SLICE",
           "staging_folder", "publish"]

#: The fixed slice of the SATNet ID test set that the CI check re-measures: rows 9000-9199.
CHECK_SLICE = 200
#: Loop counts every card reports: odd and even alike, so a parity-dependent model shows.
CARD_LOOPS = (16, 17, 32, 33, 64, 65, 128, 129)
#: Fresh puzzles of every card: the library's generator, SATNet's range of givens, a seed used nowhere else.
FRESH_GIVENS, FRESH_SEED = (31, 42), 314_159


def measure_checkpoint(model, *, loops=CARD_LOOPS, votes=(1,), ood_limit: int = 2000, data_path=None,
                       dynamics_puzzles: int = 16, vote_limit: int = 200, id_limit: int | None = None,
                       fresh_limit: int = 1000) -> dict:
    """Board accuracy per loop count (and votes) on the ID test set (all 1,000, or the first ``id_limit``), the
    first ``ood_limit`` RRN puzzles and ``fresh_limit`` fresh generated puzzles (31-42 givens, unique solutions),
    the accuracy on the CI check slice, and the loop's dynamics on ID puzzles. Runs on the model's device."""
    from ..data import sudoku as data
    from .sudoku import evaluate_sudoku

    _, id_test = data.satnet_splits(data_path, limit=id_limit)
    ood = data.rrn_test(data_path, limit=ood_limit)
    fresh = data.to_dataset(*data.generate_many(fresh_limit, givens=FRESH_GIVENS, seed=FRESH_SEED))
    results = {"id": {}, "ood": {}, "fresh": {}, "loops_trained": int(model.config.loops)}
    for name, dataset in (("id", id_test), ("ood", ood), ("fresh", fresh)):
        puzzles = data.to_tensor(list(dataset["puzzle"]))
        solutions = data.to_tensor(list(dataset["solution"]))
        for vote_count in votes:
            # Voting costs K forwards per puzzle: it is measured on the first `vote_limit` puzzles of each split,
            # and one vote on those same puzzles beside it (a voted figure is never compared across samples).
            count = len(puzzles) if vote_count == 1 else min(vote_limit, len(puzzles))
            if vote_count > 1 and count < len(puzzles) and same_sample_key(count) not in results[name]:
                results[name][same_sample_key(count)] = _scored(evaluate_sudoku(
                    model, puzzles[:count], solutions[:count], loops=loops, votes=1), count)
            per_loop = evaluate_sudoku(model, puzzles[:count], solutions[:count], loops=loops, votes=vote_count)
            results[name][f"votes={vote_count}"] = _scored(per_loop, count)
    check = id_test.select(range(min(CHECK_SLICE, len(id_test))))
    check_puzzles = data.to_tensor(list(check["puzzle"]))
    check_solutions = data.to_tensor(list(check["solution"]))
    prediction = model.solve(check_puzzles, loops=int(model.config.loops))
    along = model.solve_along(check_puzzles, loops=list(loops)) if callable(getattr(model, "solve_along", None)) else {}
    results["check_slice"] = {"rows": f"SATNet 9000-{9000 + len(check) - 1}", "loops": int(model.config.loops),
                              "board_accuracy": data.board_accuracy(prediction, check_puzzles, check_solutions),
                              # every card loop count, odd ones included: the CI re-check compares against these
                              "per_loop": {str(t): data.board_accuracy(grid, check_puzzles, check_solutions)
                                           for t, grid in sorted(along.items())}}
    dynamics_rows = id_test.select(range(min(dynamics_puzzles, len(id_test))))
    results["dynamics_id"] = measure_dynamics(model, data.to_tensor(list(dynamics_rows["puzzle"])),
                                              int(model.config.loops))
    results["ood_rows"] = ("RRN test, all 18,000 puzzles" if len(ood) >= 18_000 else
                           f"RRN test rows 0-{len(ood) - 1} (of 18,000)")
    results["fresh_rows"] = (f"{fresh_limit} fresh puzzles from jacobiscope's generator ({FRESH_GIVENS[0]}-"
                             f"{FRESH_GIVENS[1]} givens, unique solutions, seed {FRESH_SEED})")
    results["measured"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    device = next(model.parameters()).device
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else (
        f"{torch.get_num_threads()} CPU thread{'s' if torch.get_num_threads() > 1 else ''}")
    results["machine"] = f"{platform.machine()}, torch {torch.__version__}, {where}"
    return results


def same_sample_key(count: int) -> str:
    """The results key of one vote on the first ``count`` puzzles of a split (beside a voted row on them)."""
    return f"votes=1 first={count}"


def _scored(per_loop: dict, count: int) -> dict:
    return {str(k): {**v, "puzzles": count} for k, v in per_loop.items()}


def _table(results: dict, split: str) -> str:
    lines = ["| votes | " + " | ".join(f"T={t}" for t in results[split]["votes=1"]) + " |",
             "|---|" + "---|" * len(results[split]["votes=1"])]
    for votes, per_loop in results[split].items():
        cells = " | ".join(f"{100 * v['board_accuracy']:.1f}%" for v in per_loop.values())
        count = next(iter(per_loop.values())).get("puzzles")
        label = votes.split(" ")[0].split("=")[1] + (f" (first {count} puzzles)" if votes != "votes=1" and count
                                                     else "")
        lines.append(f"| {label} | {cells} |")
    intervals = _interval_line(results[split])
    return "\n".join(lines) + (f"\n\n{intervals}" if intervals else "")


def _interval_line(rows: dict) -> str:
    """The widest 95% Wilson interval of each row's cells, as +/- points (the cards give one line, not a bracket per
    cell): how far a figure of the table can move with another sample of its size."""
    from .._proportions import wilson_interval

    widths = []
    for votes, per_loop in rows.items():
        count = next(iter(per_loop.values())).get("puzzles")
        if not count:
            continue
        half = max((high - low) / 2 for low, high in (wilson_interval(round(v["board_accuracy"] * count), count)
                                                      for v in per_loop.values()))
        widths.append(f"+/- {100 * half:.1f} points at most for {votes.split(' ')[0].split('=')[1]} vote(s) "
                      f"(n = {count:,})")
    return "95% Wilson intervals: " + "; ".join(widths) + "." if widths else ""


def _training_data(recipe: dict) -> str:
    if recipe.get("train_data") == "general":
        low, high = recipe.get("general_givens", (22, 45))
        return (f"{recipe.get('general_puzzles')} puzzles from jacobiscope's generator ({low}-{high} givens, unique "
                "solutions; none shares a base grid with the SATNet test, RRN test or validation puzzles) plus SATNet "
                "Sudoku rows 0-8999")
    return "SATNet Sudoku rows 0-8999 only (the AKOrN / paper protocol; no test puzzle used for training or tuning)"


def _starting_point(recipe: dict) -> str:
    if not recipe.get("init_from"):
        return ""
    return (f"Fine-tuned from `{recipe['init_from']}` as shipped when this training started (its card describes how it "
            "was trained), not trained from scratch.\n")


def _fresh_section(results: dict) -> str:
    if not results.get("fresh"):
        return ""
    return f"\nFresh puzzles: {results['fresh_rows']}:\n\n{_table(results, 'fresh')}\n"


def write_model_card(folder, *, name: str, recipe: dict, results: dict, training: dict, description: str,
                     limitations: list[str]) -> Path:
    """Write ``README.md`` (Hub metadata header + measured results) into ``folder``."""
    folder = Path(folder)
    # max_seconds is the last training call's wall-clock budget, not part of what trained the weights (a resume
    # brings its own): a recipe on a card that others copy leaves it out.
    recipe = {key: value for key, value in recipe.items() if key != "max_seconds"}
    card = f"""---
library_name: transformers
license: apache-2.0
tags:
- jacobiscope
- looped-transformer
- sudoku
- {recipe.get('arch', 'itrsa')}
datasets:
- satnet-sudoku
metrics:
- board_accuracy
pipeline_tag: other
---

# {name}

{description}

Load it offline with jacobiscope (`jacobiscope.load_pretrained("{name}")`), from this folder with
`AutoModel.from_pretrained(path)` after `import jacobiscope.models`, or from the Hub with `trust_remote_code=True` (an
uploaded folder carries its own modeling code, written by `jacobiscope hub prepare`).

## Architecture and recipe

```json
{json.dumps(recipe, indent=1)}
```

Training data: {_training_data(recipe)}{', with random symmetry augmentation (digit relabelling, band/stack/row/column permutations, transposition) drawn afresh every epoch' if recipe.get('augment') else ''}.
{_starting_point(recipe)}Trained with `jacobiscope sudoku train` on `transformers.Trainer`: {training.get('summary', '')}

## Results (board accuracy: a board counts only if every blank is right)

Measured with `jacobiscope sudoku eval` ({results['measured']}; {results['machine']}).

In-distribution, SATNet test rows 9000-9999 (1,000 puzzles):

{_table(results, 'id')}

Out-of-distribution, {results['ood_rows']}, 17-34 givens:

{_table(results, 'ood')}
{_fresh_section(results)}
CI check: board accuracy {100 * results['check_slice']['board_accuracy']:.1f}% on {results['check_slice']['rows']} at
T={results['check_slice']['loops']}; the test suite reloads this checkpoint by name and requires at least this figure
minus a small margin.

{scaling_section(results)}
{dynamics_section(results)}
## Limitations

""" + "\n".join(f"- {item}" for item in limitations) + "\n"
    atomic_write_text(folder / "README.md", card)
    return folder / "README.md"


_SCALING_TITLE = "## Test-time scaling"


def refresh_scaling_section(folder) -> bool:
    """Write (or rewrite) the test-time-scaling section of the card in ``folder`` from its ``results.json``, just
    before its dynamics section; returns whether the card changed. The card is replaced atomically."""
    card_path, card, results = read_shipped_card(folder, "refresh_scaling_section")
    section = scaling_section(results)
    if _SCALING_TITLE in card:  # replace the old section: it runs up to the next heading
        start = card.index(_SCALING_TITLE)
        end = card.find("\n## ", start + 1) + 1  # 0: the section is the card's last
        updated = card[:start] + section + ("\n" + card[end:] if end else "")
    elif "\n## Dynamics of the loop" in card:
        at = card.index("\n## Dynamics of the loop") + 1
        updated = card[:at] + section + "\n" + card[at:]
    else:
        raise ValueError(f"{card_path} has no '## Dynamics of the loop' section to put the scaling section before")
    if updated != card:
        atomic_write_text(card_path, updated)
    return updated != card


def refresh_accuracy_tables(folder) -> bool:
    """Rewrite the accuracy tables of the card in ``folder`` from its ``results.json`` (each with its Wilson interval
    line); returns whether the card changed. A table must be the one ``results.json`` renders (with or without the
    interval line), else `ValueError`. The card is replaced atomically."""
    card_path, card, results = read_shipped_card(folder, "refresh_accuracy_tables")
    updated, position = card, 0
    for split in ("id", "ood", "fresh"):  # in the card's order: two splits can render the same rows (all 0.0%)
        if split not in results or "votes=1" not in results[split]:
            continue
        table = _table(results, split)
        bare = table.split("\n\n95% Wilson", 1)[0]
        at = updated.find(bare, position)
        if at < 0:
            raise ValueError(f"{card_path}: its {split} table is not the one results.json renders; re-ship the card")
        if not updated.startswith(table, at):
            updated = updated[:at] + table + updated[at + len(bare):]
        position = at + len(table)
    if updated != card:
        atomic_write_text(card_path, updated)
    return updated != card


def ship_checkpoint(source, name: str, *, description: str, limitations: list[str], loops=CARD_LOOPS,
                    votes=(1,), ood_limit: int = 2000, destination=None, training: dict | None = None,
                    vote_limit: int = 200, id_limit: int | None = None, device=None,
                    dynamics_puzzles: int = 16, fresh_limit: int = 1000) -> Path:
    """Copy a trained checkpoint into ``hub_configs/<name>`` (or ``destination``), measure it, and write results.json
    and the model card. No code is copied (and an ``auto_map`` is dropped): ``jacobiscope hub prepare`` writes them
    into a copy for a Hub upload."""
    from ..hub import load_pretrained

    source = Path(source)
    folder, staging = staging_folder(name, destination)
    shutil.copy2(source / "model.safetensors", staging / "model.safetensors")
    atomic_write_text(staging / "config.json", _shipped_config(source / "config.json"))
    model = load_pretrained(staging).eval()
    if device is not None:
        model = model.to(device)
    results = measure_checkpoint(model, loops=loops, votes=votes, ood_limit=ood_limit, vote_limit=vote_limit,
                                 id_limit=id_limit, dynamics_puzzles=dynamics_puzzles, fresh_limit=fresh_limit)
    recipe_path = source.parent / "recipe.json"
    recipe = json.loads(recipe_path.read_text()) if recipe_path.exists() else {}
    atomic_write_text(staging / "results.json", json.dumps(results, indent=1))
    write_model_card(staging, name=name, recipe=recipe, results=results, training=training or {},
                     description=description, limitations=limitations)
    publish(staging, folder)
    return folder


def staging_folder(name: str, destination=None) -> tuple[Path, Path]:
    """``(folder, staging)``: where checkpoint ``name`` is published (``hub_configs/<name>`` or ``destination``) and
    the empty ``<folder>.staging`` it is built in first (`jacobiscope.hub.shipped_checkpoints` skips it)."""
    root = Path(__file__).resolve().parents[2] / "hub_configs"
    folder = Path(destination) if destination is not None else root / name
    staging = folder.with_name(folder.name + ".staging")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return folder, staging


def publish(staging: Path, folder: Path) -> None:
    """Replace ``folder`` by the finished ``staging``: the published folder appears whole or not at all."""
    if folder.exists():
        shutil.rmtree(folder)
    staging.rename(folder)


def _shipped_config(path: Path) -> str:
    """config.json without ``auto_map``: a shipped folder holds no code for it to point at (the package's models
    are registered with ``AutoModel``), so a copy of the code can never drift from the package."""
    config = json.loads(path.read_text(encoding="utf-8-sig"))
    config.pop("auto_map", None)
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
