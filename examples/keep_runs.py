"""Carry long training runs across sessions: save a run's resume state into the repository, restore it later.

    python examples/keep_runs.py save runs/itrsa-protocol runs/akorn-protocol runs/zoo/itrsa-spec
    python examples/keep_runs.py restore          # every saved run back to runs/<name>, unless runs/ is newer

`runs/` is not tracked by git, and a session can end without warning. `save` copies what resuming needs — the
newest complete checkpoint (weights, EMA, optimizer, scheduler, RNG, trainer state), `recipe.json`,
`checkpoint_format.json`, `accuracy_history.json`, `best/` and, for the general regime, the generated puzzle parts — to
`examples/recipes/resume/<name>/`, replacing the previous copy (commit it). `restore` puts it back so that
`jacobiscope sudoku train --config <name>/recipe.json --out runs/<name>` continues from that step.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # _resume_store, beside this script, also when loaded by path
import _resume_store  # noqa: E402

STORE = ROOT / "examples" / "recipes" / "resume"


def save(runs: list[Path]) -> None:
    for run in runs:
        kept = STORE / _name(run)
        kept.parent.mkdir(parents=True, exist_ok=True)
        step = _resume_store.keep(run, kept)
        if step is None:
            print(f"{run}: nothing newer than the kept copy (or no complete checkpoint nor generated puzzles yet), "
                  "nothing saved")
            continue
        print(f"saved {_name(run)} at step {step} to {_shown(kept)}")


def _shown(path: Path) -> Path:
    """``path`` relative to the repository when it lies inside it."""
    try:
        return path.resolve().relative_to(ROOT)
    except ValueError:
        return path


def _name(run: Path) -> Path:
    """The run's path under runs/ (``zoo/itrsa-spec`` for the zoo's runs), or its folder name elsewhere."""
    try:
        return run.resolve().relative_to(ROOT / "runs")
    except ValueError:
        return Path(run.name)


def restore(target_root: Path) -> None:
    runs = sorted(p.parent for p in STORE.rglob("recipe.json") if not p.parent.name.startswith("."))
    for kept in runs:
        target = target_root / kept.relative_to(STORE)
        target.parent.mkdir(parents=True, exist_ok=True)
        step = _resume_store.restore(kept, target)
        if step is None:
            print(f"{target}: already at step {_resume_store.step_of(target)}, left as it is")
            continue
        print(f"restored {kept.name} at step {step} to {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "restore"))
    parser.add_argument("runs", nargs="*", help="run folders to save (save only)")
    parser.add_argument("--into", default=str(ROOT / "runs"), help="where restore puts the runs (default runs/)")
    options = parser.parse_args()
    if options.action == "save":
        save([Path(run) for run in options.runs])
    else:
        restore(Path(options.into))


if __name__ == "__main__":
    main()
