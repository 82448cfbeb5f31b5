"""Train and ship the zoo of reference-model variants, each differing from its family's base in one thing.

    python examples/train_zoo.py --budget 3000              # train what is unfinished for at most 50 minutes
    python examples/train_zoo.py --only itrsa-heads-1 akorn-n8
    python examples/train_zoo.py --table                     # print the README table of the shipped variants
    python examples/train_zoo.py --update-readme             # write that table into README.md, in place
    python examples/train_zoo.py --redescribe                # rewrite the shipped cards' description lines

Start it once per core to train two variants at a time: a variant is locked from its training to its shipping
(`runs/zoo/<name>/.zoo.lock`, the operating system's lock, gone with its process), and a call skips what another holds.

The variants and their bases are `examples/recipes/zoo.json`. Runs live in `runs/zoo/<name>` and resume where they
stopped (checkpoints every `save_steps`; a run stops cleanly when the budget is spent, so a session can end at any
time). A variant whose run reached its `max_steps` is measured (ID: all 1,000 SATNet test puzzles; OOD: the first
2,000 RRN puzzles; 1,000 fresh generated puzzles; T = 16/17/32/33/64/65/128/129; the loop's max Lyapunov exponent
and Jacobian norm on ID puzzles) and shipped to `hub_configs/zoo/<name>/` with its card.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # _resume_store, beside this script, also when loaded by path
import _resume_store  # noqa: E402

#: Where `--keep` puts each unfinished run's resume state to commit, and `--restore` takes it back from.
STORE = ROOT / "examples" / "recipes" / "resume" / "zoo"
ZOO = json.loads((ROOT / "examples" / "recipes" / "zoo.json").read_text())


def family_of(name: str) -> str:
    """A variant's family: the first entry of its zoo.json line, or its parent variant's family."""
    first = ZOO["variants"][name][0]
    return first if first in ZOO["bases"] else family_of(first)


def recipe_for(name: str, **overrides):
    """The variant's recipe: what it starts from (its family's base, or the variant it names first, e.g. the
    large-N AKOrN for the large-N AKOrN with the oscillator norm), then ``overrides`` (budget, a tiny stand-in),
    then its one change."""
    import dataclasses

    from jacobiscope.recipes.sudoku import SudokuRecipe

    first, changes = ZOO["variants"][name]
    start = ZOO["bases"][first] if first in ZOO["bases"] else dataclasses.asdict(recipe_for(first))
    return SudokuRecipe(**{**start, **overrides, **changes})


def describe(name: str) -> str:
    first, changes = ZOO["variants"][name]
    family = family_of(name)
    model = "ItrSA" if family == "itrsa" else "AKOrN"
    seed = changes.get("seed")
    if seed is not None:  # a seed repeat: the same recipe as the variant it repeats, another seed
        others = {key: value for key, value in changes.items() if key != "seed"}
        repeated = next((other for other, (f, c) in ZOO["variants"].items()
                         if f == first and c == others and other != name), None)
        if repeated is None:
            raise SystemExit(f"zoo.json: {name} repeats no variant (no variant of {first} has the changes {others})")
        return (f"A seed repeat in the zoo of the reference {model} Sudoku solver: the recipe of `zoo/{repeated}` "
                f"with seed={seed} instead of {ZOO['bases'][family].get('seed', 0)}. Same data (SATNet rows 0-8999) "
                f"and budget, so differences from `zoo/{repeated}` measure the seed-to-seed spread.")
    change = ", ".join(f"{key}={value}" for key, value in changes.items()) or "none (the base)"
    start = "the family's base recipe" if first in ZOO["bases"] else f"the recipe of `zoo/{first}`"
    return (f"A zoo variant of the reference {model} Sudoku solver: {start} with one change: {change}. Same data "
            "(SATNet rows 0-8999), budget and seed as every other variant of the family, so differences in the "
            "results below come from that change.")


def train(names: list[str], budget: float, runs: Path, ship_dir: Path, overrides: dict, measure: dict) -> None:
    """Train and ship ``names`` in order until ``budget`` seconds are spent. Several calls may run at once (one per
    core): each variant is locked from its training to its shipping, and a call skips a variant another holds."""
    from jacobiscope._locks import FolderBusyError, folder_lock

    deadline = time.monotonic() + budget
    for name in names:
        if (ship_dir / name / "results.json").exists():
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with folder_lock(runs / name, "trained or shipped", name=".zoo.lock"):
                if (ship_dir / name / "results.json").exists():
                    continue  # shipped by another call since the check above
                if not train_one(name, left, runs, ship_dir, overrides, measure):
                    break  # out of budget: the next call resumes this run
        except FolderBusyError as busy:
            print(f"[zoo] {name}: skipped, {busy}", flush=True)


def train_one(name: str, seconds: float, runs: Path, ship_dir: Path, overrides: dict, measure: dict) -> bool:
    """Train one variant for at most ``seconds``; ship it when its run is finished (True) or say it is not (False)."""
    from jacobiscope.recipes.shipping import ship_checkpoint
    from jacobiscope.recipes.sudoku import train_sudoku

    recipe = recipe_for(name, max_seconds=seconds, **overrides)
    summary = train_sudoku(recipe, runs / name, progress=False)
    print(f"[zoo] {name}: step {summary['steps']} of {recipe.max_steps}", flush=True)
    diverged = summary.get("diverged")
    if summary["steps"] < recipe.max_steps and not diverged:
        return False
    limitations = ["A small CPU-trained variant for comparisons within the zoo, not a best model."]
    if diverged:  # shipped as reached (the zoo measures what a change does, failure included)
        limitations.append(f"Training diverged: {diverged['why']} (of {recipe.max_steps} planned).")
    ship_checkpoint(runs / name / "best", f"zoo/{name}", description=describe(name), limitations=limitations,
                    destination=ship_dir / name, training={"summary": kept_weights(runs / name, summary)}, **measure)
    print(f"[zoo] shipped {name}", flush=True)
    return True


def kept_weights(run: Path, summary: dict) -> str:
    """The card's training line: how far the run went and which save's weights are shipped (best/)."""
    best = json.loads((run / "best" / "accuracy.json").read_text())
    cells = best.get("validation_cell_accuracy")
    tie = f", blank cells {100 * cells:.1f}%" if cells is not None else ""
    return (f"{summary['steps']} steps; shipped: the {best.get('weights', 'raw')} weights of step {best['step']}, the "
            f"best save on the validation puzzles (board accuracy {100 * best['validation_board_accuracy']:.1f}%"
            f"{tie}; ties go to blank-cell accuracy).")


def _keeps(per_loop: dict) -> str:
    """yes / no (peak T) / - (no board solved): the card's test-time-scaling verdict, in short."""
    from jacobiscope.recipes import loop_scaling

    verdict = loop_scaling(per_loop)
    return {True: "yes", None: "-"}.get(verdict["keeps_scaling"], f"no (peak T={verdict['peak_loops']})")


def table(ship_dir: Path) -> str:
    rows = ["| variant | change | ID T=16 / 32 / 33 / 128 | RRN T=16 / 32 / 33 / 128 | fresh T=16 / 32 / 33 / 128 | "
            "ID blank cells T=16 / 128 | keeps scaling ID / RRN / fresh | max Lyapunov, median [IQR] | "
            "‖J‖ at T, median [IQR] |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name in ZOO["variants"]:
        path = ship_dir / name / "results.json"
        if not path.exists():
            continue
        results = json.loads(path.read_text())
        cells = []
        for split in ("id", "ood", "fresh"):
            per_loop = results[split]["votes=1"]
            cells.append(" / ".join(f"{100 * per_loop[t]['board_accuracy']:.1f}" for t in ("16", "32", "33", "128")
                                    if t in per_loop))
        # blank cells grade the variants that complete no board (graded where board accuracy is all zero)
        blanks = " / ".join(f"{100 * results['id']['votes=1'][t]['cell_accuracy']:.1f}" for t in ("16", "128")
                            if t in results["id"]["votes=1"])
        scaling = " / ".join(_keeps(results[split]["votes=1"]) for split in ("id", "ood", "fresh"))
        change = ", ".join(f"{k}={v}" for k, v in ZOO["variants"][name][1].items()) or "base"
        dynamics = results["dynamics_id"]
        rows.append(f"| `{name}` | {change} | {cells[0]} | {cells[1]} | {cells[2]} | {blanks} | {scaling} | "
                    f"{_spread(dynamics, 'max_lyapunov', 3)} | {_spread(dynamics, 'spectral_norm_end', 2)} |")
    return "\n".join(rows)


def _spread(dynamics: dict, key: str, digits: int) -> str:
    """``median [q1, q3]`` (a flag when a puzzle lies beyond 3 IQR); a card measured before medians: its mean."""
    if f"{key}_median" not in dynamics:
        return f"mean {dynamics[f'{key}_mean']:.{digits}f}"
    low, high = dynamics[f"{key}_iqr"]
    flag = f", {len(dynamics[f'{key}_outliers'])} outlier(s)" if dynamics.get(f"{key}_outliers") else ""
    return f"{dynamics[f'{key}_median']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]{flag}"


def update_readme(ship_dir: Path, readme: Path = ROOT / "README.md") -> int:
    """Replace the zoo table in ``readme`` (the table whose header starts ``| variant | change |``) with `table`'s;
    returns its row count. The file is replaced atomically."""
    from jacobiscope._io import atomic_write_text

    lines = readme.read_text().split("\n")
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("| variant | change |")), None)
    if start is None:
        raise SystemExit(f"{readme} has no zoo table (a line starting '| variant | change |')")
    end = start
    while end < len(lines) and lines[end].lstrip().startswith("|"):
        end += 1
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    rows = table(ship_dir).split("\n")
    lines[start:end] = [indent + row for row in rows]
    atomic_write_text(readme, "\n".join(lines))
    return len(rows) - 2


def redescribe(ship_dir: Path) -> list[str]:
    """Rewrite each shipped card's description paragraph (the one under its ``# zoo/<name>`` title) with
    `describe`'s words; returns the cards changed. Each card is replaced atomically."""
    from jacobiscope._io import atomic_write_text

    changed = []
    for card in sorted(ship_dir.glob("*/README.md")):
        name = card.parent.name
        if name not in ZOO["variants"]:
            continue
        lines = card.read_text().split("\n")
        if f"# zoo/{name}" not in lines:
            raise SystemExit(f"{card}: no '# zoo/{name}' title line, so no description to rewrite; re-ship it")
        title = lines.index(f"# zoo/{name}")
        if lines[title + 2] != describe(name):
            lines[title + 2] = describe(name)
            atomic_write_text(card, "\n".join(lines))
            changed.append(name)
    return changed


def keep_or_restore(names: list[str], runs: Path, ship_dir: Path, store: Path, keeping: bool) -> None:
    """``--keep``: copy the resume state of each run not yet shipped to ``store/<name>``; ``--restore``: put it back
    into ``runs/<name>`` where the run holds nothing newer. A shipped variant's state is dropped from the store."""
    import shutil

    for name in names:
        if (ship_dir / name / "results.json").exists():
            shutil.rmtree(store / name, ignore_errors=True)  # shipped: its card and weights are what is kept
            continue
        if keeping:
            step = _resume_store.keep(runs / name, store / name)
            if step is not None:
                print(f"[zoo] {name}: kept step {step}", flush=True)
        else:
            step = _resume_store.restore(store / name, runs / name)
            if step is not None:
                print(f"[zoo] {name}: restored step {step}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(ZOO["variants"]), help="these variants (default: all)")
    parser.add_argument("--budget", type=float, default=3000.0, help="seconds of training in this call (default 3000)")
    parser.add_argument("--runs", default=str(ROOT / "runs" / "zoo"), help="run folders (default runs/zoo)")
    parser.add_argument("--ship-dir", default=str(ROOT / "hub_configs" / "zoo"), help="default hub_configs/zoo")
    parser.add_argument("--table", action="store_true", help="print the README table of the shipped variants")
    parser.add_argument("--update-readme", action="store_true", help="write that table into README.md in place")
    parser.add_argument("--redescribe", action="store_true", help="rewrite the shipped cards' description lines")
    parser.add_argument("--tiny", action="store_true", help="a 32-channel, 4-step stand-in of each run (tests)")
    parser.add_argument("--compile-loop", action="store_true",
                        help="train through torch.compile (the recipe's compile_loop: same math, rounding aside; "
                             "1.1-1.4x faster AKOrN steps on a CPU thread)")
    parser.add_argument("--keep", action="store_true",
                        help="copy each unfinished run's resume state to examples/recipes/resume/zoo (to commit)")
    parser.add_argument("--restore", action="store_true", help="put kept resume states back into --runs")
    parser.add_argument("--store", default=str(STORE), help="where --keep / --restore keep states")
    options = parser.parse_args()
    ship_dir = Path(options.ship_dir)
    if options.table:
        print(table(ship_dir))
        return
    if options.update_readme:
        print(f"README.md: zoo table of {update_readme(ship_dir)} variants")
        return
    if options.redescribe:
        print(f"re-described: {', '.join(redescribe(ship_dir)) or 'none'}")
        return
    overrides, measure = {}, {}
    if options.tiny:
        overrides = {"hidden_size": 32, "num_heads": 2, "max_steps": 4, "save_steps": 2, "logging_steps": 2,
                     "eval_limit": 4, "train_limit": 32, "warmup_steps": 0, "loops_min": 2, "loops_max": 3,
                     "validation_loops": [2]}
        measure = {"loops": (2, 3, 16, 32, 33, 128), "ood_limit": 10, "id_limit": 10, "fresh_limit": 5,
                   "dynamics_puzzles": 2, "vote_limit": 2}
    if options.compile_loop:
        overrides["compile_loop"] = True
    names = options.only or list(ZOO["variants"])
    if options.keep or options.restore:
        keep_or_restore(names, Path(options.runs), ship_dir, Path(options.store), options.keep)
        return
    train(names, options.budget, Path(options.runs), ship_dir, overrides, measure)


if __name__ == "__main__":
    main()
