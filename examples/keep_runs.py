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
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "examples" / "recipes" / "resume"
KEEP = ("recipe.json", "checkpoint_format.json", "accuracy_history.json", "best", "general")


def _newest_checkpoint(run: Path) -> Path | None:
    """The newest checkpoint the run could resume from — by the trainer's own test, so a save still being written
    (weights there, weight average or random streams not yet) is never the one kept."""
    import warnings

    from jacobiscope.recipes._sudoku_callbacks import _latest_checkpoint

    averaged = any((p / "ema.safetensors").is_file() for p in run.glob("checkpoint-*"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an incomplete newer save is expected while the run is training
        newest = _latest_checkpoint(run, needs_average=averaged)
    return Path(newest) if newest else None


def _step(run: Path) -> int:
    checkpoint = _newest_checkpoint(run)
    return int(checkpoint.name.split("-")[-1]) if checkpoint else -1


def _replace(source: Path, target: Path) -> None:
    staging = target.with_name(target.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    checkpoint = _newest_checkpoint(source)
    if checkpoint is not None:
        shutil.copytree(checkpoint, staging / checkpoint.name)
    for name in KEEP:
        path = source / name
        if path.is_dir():
            shutil.copytree(path, staging / name)
        elif path.is_file():
            shutil.copy2(path, staging / name)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)  # the kept copy is whole or absent, never half-written


def save(runs: list[Path]) -> None:
    for run in runs:
        if _step(run) < 0 and not (run / "general").is_dir():
            print(f"{run}: no complete checkpoint (nor generated puzzles) yet, nothing saved")
            continue
        kept = STORE / _name(run)
        kept.parent.mkdir(parents=True, exist_ok=True)
        _replace(run, kept)
        print(f"saved {_name(run)} at step {_step(kept)} to {_shown(kept)}")


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
    runs = sorted(p.parent for p in STORE.rglob("recipe.json") if not p.parent.name.endswith(".staging"))
    for kept in runs:
        target = target_root / kept.relative_to(STORE)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() and _step(target) >= _step(kept):
            print(f"{target}: already at step {_step(target)}, left as it is")
            continue
        _replace(kept, target)
        print(f"restored {kept.name} at step {_step(target)} to {target}")


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
