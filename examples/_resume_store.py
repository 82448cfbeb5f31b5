"""Keep a training run's resume state in the repository, and put it back: sessions end and machines are replaced,
so a run that lasts longer than one session survives only through what is committed.

    from _resume_store import keep, restore
    keep(Path("runs/zoo/itrsa-base-seed3"), Path("examples/recipes/resume/zoo/itrsa-base-seed3"))
    restore(Path("examples/recipes/resume/zoo/itrsa-base-seed3"), Path("runs/zoo/itrsa-base-seed3"))

What is kept: the newest complete checkpoint (weights, optimizer, scheduler, random streams, EMA), the run's recipe,
checkpoint format and validation history, and ``best/`` (the checkpoint chosen so far). Both copies go through a
partial folder renamed into place, so an interrupted keep or restore leaves the previous state whole.
"""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

#: Run-folder items a resumed run reads besides its newest checkpoint (Sudoku runs keep accuracy_history.json and,
#: for the general regime, the generated puzzle parts in general/; looped-LM runs validation_history.json).
KEEP = ("recipe.json", "checkpoint_format.json", "validation_history.json", "accuracy_history.json", "best",
        "general")


def newest_checkpoint(run: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` of ``run`` (None: none yet)."""
    from jacobiscope.recipes._sudoku_callbacks import _latest_checkpoint

    if not run.is_dir():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a save still being written is expected while the run trains
        newest = _latest_checkpoint(run, needs_average=any(run.glob("checkpoint-*/ema.safetensors")))
    return Path(newest) if newest else None


def step_of(run: Path) -> int:
    """The step of the newest complete checkpoint of ``run`` (-1: none)."""
    newest = newest_checkpoint(run)
    return int(newest.name.split("-")[-1]) if newest else -1


def keep(run: Path, store: Path) -> int | None:
    """Copy ``run``'s resume state to ``store`` (replacing an older copy); returns the step kept (-1: what was kept
    has no checkpoint yet, only e.g. generated puzzles), or None when nothing was copied (nothing to keep, or the
    store already holds this step or a newer one)."""
    newest = newest_checkpoint(run)
    if store.exists() and step_of(store) >= step_of(run):
        return None
    if newest is None and not any((run / item).exists() for item in KEEP):
        return None
    partial = store.with_name(f".{store.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if newest is not None:
        shutil.copytree(newest, partial / newest.name)
    for item in KEEP:
        source = run / item
        if source.is_dir():
            shutil.copytree(source, partial / item)
        elif source.is_file():
            shutil.copy2(source, partial / item)
    old = store.with_name(f".{store.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if store.exists():
        store.rename(old)
    partial.rename(store)
    shutil.rmtree(old, ignore_errors=True)
    return step_of(store)


def restore(store: Path, run: Path) -> int | None:
    """Copy a kept state back into ``run`` when the run does not exist or holds no checkpoint as new; returns the
    step restored (-1: no checkpoint in it), or None (nothing kept, or the run is as new or newer: left as it is)."""
    if not store.is_dir() or (run.exists() and step_of(run) >= step_of(store)):
        return None
    run.mkdir(parents=True, exist_ok=True)
    for item in store.iterdir():
        if item.name.startswith("."):
            continue
        destination = run / item.name
        partial = run / f".{item.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, partial)
        if destination.is_dir():
            shutil.rmtree(destination)
        partial.replace(destination)
    return step_of(run)
