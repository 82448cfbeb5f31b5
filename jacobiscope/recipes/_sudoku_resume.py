"""The run folder of a Sudoku training: checked before any work, and the bookkeeping of a resumed run (its recorded
recipe compared field by field, applied changes logged, a finished run reported rather than trained again).

Example::

    >>> from jacobiscope.recipes.sudoku import SudokuRecipe
    >>> from jacobiscope.recipes._sudoku_resume import _validation_key
    >>> _validation_key(SudokuRecipe(loops=24, eval_limit=100))
    {'eval_limit': 100, 'givens': [31, 42], 'seed': 20261201, 'loops': [24]}
"""
from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import asdict
from pathlib import Path

from transformers import TrainerCallback

from .._io import atomic_write_text
from ..errors import RecipeError
from ._sudoku_fields import _WHY, RECIPE_FIELDS
from ._sudoku_recipe import SudokuRecipe

__all__ = ["RECIPE_CHANGES_FILE"]


def _run_folder(out_dir) -> Path:
    """``out_dir`` as a Path that can be a run folder (not a file, no file in the way), checked before any work."""
    import errno

    from .._io import path_error

    if isinstance(out_dir, bytes) or not isinstance(out_dir, (str, os.PathLike)) or not str(os.fspath(out_dir)).strip():
        raise RecipeError(f"train_sudoku expected a run folder path, got {out_dir!r} — pass e.g. 'runs/itrsa'")
    text = os.fspath(out_dir)
    if "\0" in text:
        raise path_error(errno.EINVAL, f"run folder {text!r} contains a NUL character — pass a plain folder path")
    long = [part for part in Path(text).parts if len(os.fsencode(part)) > 255]
    if long:
        raise path_error(errno.ENAMETOOLONG, f"run folder name {long[0][:40]!r}... is {len(long[0])} characters, too "
                                             "long for the file system — use a name under 200 characters")
    out = Path(text).expanduser()
    ancestor = out
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise path_error(errno.ENOTDIR, f"run folder {str(out_dir)!r} cannot be created: {str(ancestor)!r} is a file — "
                                        "give a folder path (it is created), e.g. runs/itrsa")
    return out


def _refuse_output_inside_inputs(out: Path, inputs: dict) -> None:
    """Refuse a run folder that is, or lies inside, an input (training would write into it), or that holds the
    ``init_from`` weights (best/ and final/ would replace what the run starts from). Paths are compared as the
    shared `jacobiscope._io.path_relation` compares them (symlinks, ``..``, hard links)."""
    from .._io import path_relation

    for what, path in inputs.items():
        if path is None:
            continue
        relation = path_relation(out, path)
        if relation == "holds" and what != "the init_from folder":
            relation = None
        if relation is not None:
            verb = {"same": "is", "inside": "lies inside", "holds": "holds"}[relation]
            raise RecipeError(f"the run folder {str(out)!r} {verb} {what} ({str(path)!r}): training would write "
                              f"over its own input — choose another run folder (--out) outside {str(path)!r}")


RECIPE_CHANGES_FILE = "recipe_changes.json"


def _validation_key(recipe: SudokuRecipe) -> dict:
    """What a validation score depends on: scores under another key are not compared when choosing best/."""
    return {"eval_limit": recipe.eval_limit, "givens": list(recipe.validation_givens), "seed": recipe.validation_seed,
            "loops": list(recipe.validation_loops or [recipe.loops])}


class _ScheduleCallback(TrainerCallback):
    """On resume, puts this recipe's learning rate and warm-up into the optimizer and scheduler the Trainer restored
    (their saved state holds the recorded rate), and its save / logging intervals into the restored state (the
    Trainer keeps the checkpoint's). The same value as recorded gives the same numbers: an exact resume stays exact."""

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        if not state.global_step:
            return
        state.save_steps, state.logging_steps = args.save_steps, args.logging_steps
        scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)
        lambdas = getattr(scheduler, "lr_lambdas", None)
        if optimizer is None or lambdas is None:
            return
        scheduler.base_lrs = [float(args.learning_rate)] * len(scheduler.base_lrs)
        for group, base, function in zip(optimizer.param_groups, scheduler.base_lrs, lambdas):
            group["initial_lr"] = base
            group["lr"] = base * function(scheduler.last_epoch)
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]


_PREVIOUS_RUN = ("best", ".best.partial", ".best.old", "final", "final_ema", "accuracy_history.json",
                 "train_summary.json", "diverged.json", RECIPE_CHANGES_FILE)


def _clear_previous_run(out_dir: Path) -> None:
    """``resume=False`` starts over; the previous run's checkpoints and results are moved, not deleted, into
    ``previous-runs/<time>/`` (left in place, a later resume would pick an old checkpoint with a higher step and mix
    the two runs). Its generated data (general/) stays where it is: the new run reuses it."""
    moved = sorted((p for p in out_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()), key=lambda p: p.name)
    moved += [out_dir / name for name in _PREVIOUS_RUN if (out_dir / name).exists() or (out_dir / name).is_symlink()]
    if not moved:
        return
    archive = out_dir / "previous-runs" / time.strftime("%Y%m%d-%H%M%S")
    while archive.exists():
        archive = archive.with_name(archive.name + "+")
    archive.mkdir(parents=True)
    for path in moved:
        os.replace(path, archive / path.name)
    warnings.warn(f"resume=False: the previous run's {', '.join(p.name for p in moved)} moved to {archive}; "
                  "training starts over", UserWarning, stacklevel=4)


def _as_json(value):
    return json.loads(json.dumps(value))  # tuples -> lists, the form recipe.json records


def _change_policy(name: str, old, new, recorded: dict) -> str:
    policy = RECIPE_FIELDS[name][1]
    if name == "ema_beta" and (float(old or 0) > 0) != (float(new or 0) > 0):
        return "ema"
    if policy == "model":
        arch = recorded.get("arch", "itrsa")
        try:
            used = SudokuRecipe(arch=arch).model_config() if arch in ("itrsa", "akorn") else {}
        except RecipeError:
            used = {}
        if name != "arch" and name not in used:
            return "apply"  # a field the recorded architecture does not read (eta of an akorn run): no effect
    return policy


_REFUSED_WHY = dict(_WHY, ema="its checkpoints hold no weight average to continue (or hold one that would be dropped)")


def _recipe_changes(out_dir: Path, recipe: SudokuRecipe, checkpoint: str) -> list[dict]:
    """The fields in which ``recipe`` differs from the recipe the run in ``out_dir`` recorded, each with what a resume
    does with it; raises `RecipeError` (nothing written) when one of them cannot apply to the resumed run."""
    path = out_dir / "recipe.json"
    if not path.is_file():
        warnings.warn(f"{path} is missing: the resumed run's recipe cannot be compared with the one it was trained "
                      "with; recording this one", UserWarning, stacklevel=4)
        return []
    try:
        recorded = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as error:
        recorded = error
    if not isinstance(recorded, dict):
        raise RecipeError(f"{path} (the recipe this run was trained with) is unreadable ({recorded}) — restore it, or "
                          "start a new run: resume=False (--no-resume) or another run folder")
    current = _as_json(asdict(recipe))
    defaults = _as_json(asdict(SudokuRecipe()))
    changes = []
    for name in RECIPE_FIELDS:
        old, new = recorded.get(name, defaults[name]), current[name]
        if old == new or RECIPE_FIELDS[name][1] == "call":
            continue
        changes.append({"field": name, "old": old, "new": new, "policy": _change_policy(name, old, new, recorded)})
    step = int(Path(checkpoint).name.split("-")[-1])
    if 0 < recipe.max_steps < step:
        raise RecipeError(f"max_steps={recipe.max_steps} is below step {step}, which {str(out_dir)!r} has already "
                          f"reached ({Path(checkpoint).name}): its weights cannot go back — set max_steps >= {step}, or "
                          "start a new run: resume=False (--no-resume) or another run folder (--out)")
    refused = [change for change in changes if change["policy"] != "apply"]
    if refused:
        listed = "; ".join(f"{c['field']}: recorded {c['old']!r}, now {c['new']!r} ({_REFUSED_WHY[c['policy']]})"
                           for c in refused)
        restore = ", ".join(f"{c['field']}={c['old']!r}" for c in refused)
        raise RecipeError(f"cannot resume {Path(checkpoint).name} of {str(out_dir)!r} with a changed recipe: {listed} "
                          f"— set {restore} back to resume, or start a new run: resume=False (--no-resume) or another "
                          "run folder (--out)")
    return changes


def _record_changes(out_dir: Path, changes: list[dict], checkpoint: str) -> None:
    """Append the applied changes to ``recipe_changes.json`` (from which step each holds) and say so."""
    step = int(Path(checkpoint).name.split("-")[-1])
    path = out_dir / RECIPE_CHANGES_FILE
    try:
        log = json.loads(path.read_text()) if path.is_file() else []
    except (OSError, ValueError):
        log = []
    log = log if isinstance(log, list) else []
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    log.extend({"from_step": step, "field": c["field"], "old": c["old"], "new": c["new"], "time": stamp}
               for c in changes)
    atomic_write_text(path, json.dumps(log, indent=1))
    listed = ", ".join(f"{c['field']} {c['old']!r} -> {c['new']!r}" for c in changes)
    warnings.warn(f"resuming {Path(checkpoint).name} with a changed recipe: {listed} (applied from step {step} on; "
                  f"recorded in {RECIPE_CHANGES_FILE})", UserWarning, stacklevel=4)


def _unapplied(summary: dict, changes: list[dict]) -> dict:
    """A finished run trains nothing: a changed recipe is reported as not applied, never silently dropped."""
    if changes:
        listed = ", ".join(f"{c['field']} {c['old']!r} -> {c['new']!r}" for c in changes)
        warnings.warn(f"the run has finished, so its changed recipe ({listed}) was not applied — raise max_steps to "
                      "continue with it, or start a new run", UserWarning, stacklevel=4)
        summary = dict(summary, recipe_changes_not_applied=[{k: c[k] for k in ("field", "old", "new")}
                                                            for c in changes])
    return summary


def _finished_summary(out_dir: Path, checkpoint: str | None, recipe: SudokuRecipe) -> dict | None:
    """A run that already reached ``max_steps`` (its last checkpoint is there and its summary was written) is
    reported as finished, not trained one step further and re-saved."""
    summary_path = out_dir / "train_summary.json"
    if checkpoint is None or recipe.max_steps is None or recipe.max_steps <= 0 or not summary_path.is_file():
        return None
    try:
        step = json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"]
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError, KeyError):
        return None
    if step < recipe.max_steps or summary.get("steps", -1) < recipe.max_steps:
        return None
    return dict(summary, already_finished=True, resumed_from=checkpoint)
