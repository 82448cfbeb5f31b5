"""Train and evaluate the reference Sudoku solvers with `transformers.Trainer` (the benchmark protocol of AKOrN and
of Tomihari & Karakida: train on SATNet rows 0-8999, test in-distribution on rows 9000-9999 and out-of-distribution on
the RRN test set).

Example::

    >>> from jacobiscope.recipes.sudoku import SudokuRecipe, build_model
    >>> recipe = SudokuRecipe(arch="itrsa", hidden_size=16, num_heads=2, loops=4)
    >>> model = build_model(recipe)
    >>> type(model).__name__, model.config.loops, model.training
    ('ItrSAForSudoku', 4, True)

This module trains (`train_sudoku`); the recipe (`SudokuRecipe`, `RECIPE_FIELDS`), the training data
(`validation_puzzles`, `general_training_puzzles`, `LoopCountCollator`), the run folder's resume bookkeeping and the
evaluation (`predict_along`, `evaluate_sudoku`, `puzzle_records`) live in the ``_sudoku_*`` modules beside it and are
importable from here.
"""
from __future__ import annotations

import copy
import difflib
import json
import logging
import os
import re
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import Trainer, TrainingArguments

from .._io import atomic_write_text
from ..errors import RecipeError
from ..training._resume_at_end import StopAtMaxStepsMixin
from ._sudoku_callbacks import (
    DivergenceCallback, EMACallback, RandomStreamsCallback, TimeBudgetCallback, _AccuracyCallback,
    _declare_checkpoint_format, _latest_checkpoint,
)
# The names below that this module does not use are imported so that they stay importable from here, as before the
# recipe, data, resume and evaluation parts moved into their own modules.
from ._sudoku_data import GENERAL_PART_ROWS, LoopCountCollator, general_training_puzzles, validation_puzzles
from ._sudoku_eval import evaluate_sudoku, predict_along, puzzle_records
from ._sudoku_fields import (
    MAX_BATCH_SIZE, MAX_GENERAL_PUZZLES, MAX_HIDDEN_SIZE, MAX_LOOPS, MAX_SEED, MAX_STEPS, MAX_VALIDATION_PUZZLES,
    RECIPE_FIELDS,
)
from ._sudoku_recipe import SudokuRecipe
from ._sudoku_resume import (
    RECIPE_CHANGES_FILE, _clear_previous_run, _finished_summary, _recipe_changes, _record_changes,
    _refuse_output_inside_inputs, _run_folder, _ScheduleCallback, _unapplied, _validation_key,
)

__all__ = ["SudokuRecipe", "RecipeError", "RECIPE_FIELDS", "train_sudoku", "evaluate_sudoku", "predict_along",
           "puzzle_records", "EMACallback", "build_model", "LoopCountCollator", "validation_puzzles",
           "general_training_puzzles", "TimeBudgetCallback", "check_report_to"]

logger = logging.getLogger(__name__)

#: Validation puzzles the dynamics are measured on (``dynamics_every``), and the loops of each measurement.
DYNAMICS_PUZZLES, DYNAMICS_LOOPS, DYNAMICS_TRANSIENT = 4, 16, 8


def build_model(recipe: SudokuRecipe):
    from ..models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

    if recipe.init_from is not None:
        from ..hub import load_pretrained

        model = load_pretrained(str(init_from_folder(recipe.init_from)))
        expected = ItrSAForSudoku if recipe.arch == "itrsa" else AKOrNForSudoku
        if not isinstance(model, expected):
            raise RecipeError(f"init_from={recipe.init_from!r} holds a {type(model).__name__}, but the recipe's arch is "
                              f"{recipe.arch!r} — set arch to match the weights")
        mismatched = {k: (getattr(model.config, k), v) for k, v in recipe.model_config().items()
                      if k != "loops" and getattr(model.config, k, v) != v}
        if mismatched:
            raise RecipeError(f"init_from={recipe.init_from!r} differs from the recipe in {mismatched} "
                              "(checkpoint, recipe) — make the recipe describe the checkpoint's architecture")
        model.config.loops = recipe.loops
        return model.train()
    if recipe.arch == "itrsa":
        return ItrSAForSudoku(ItrSAConfig(**recipe.model_config()))
    return AKOrNForSudoku(AKOrNConfig(**recipe.model_config()))


def init_from_folder(name) -> Path:
    """The local folder ``init_from`` names: a shipped checkpoint's short name, a local model folder, or a Hub repo
    id already in the local Hugging Face cache. Nothing is downloaded, ever: anything else is a `RecipeError` with
    the fix (download it explicitly, then name the folder).

    Example::

        >>> from jacobiscope.recipes.sudoku import init_from_folder
        >>> init_from_folder("itrsa-sudoku").name
        'itrsa-sudoku'
    """
    from .. import hub

    shipped_checkpoints = hub.shipped_checkpoints
    repo_id = getattr(hub, "_REPO_ID", re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$"))
    text = os.fspath(name)
    shipped = shipped_checkpoints()
    if text in shipped:
        return Path(shipped[text])
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise RecipeError(f"init_from {text!r} is a file, not a model folder — set init_from to the folder that "
                          "holds config.json and model.safetensors")
    names = ", ".join(shipped) or "none"
    if repo_id.match(text) and "/" in text and "--" not in text and ".." not in text and not path.parent.is_dir():
        lookup = getattr(hub, "_cached_snapshot", None)
        cached = lookup(text) if lookup is not None else None  # a lookup in the local cache only, never the network
        if cached is not None:
            return cached
        raise RecipeError(f"init_from {text!r} looks like a Hub repo id that is not in the local Hugging Face cache, "
                          "and training never downloads — download it explicitly first (huggingface_hub."
                          f"snapshot_download({text!r}), or `hf download {text}`) and set init_from to that folder, or "
                          f"use a shipped checkpoint ({names})")
    close = difflib.get_close_matches(text, list(shipped), n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"check the path, or use a shipped checkpoint ({names})"
    raise RecipeError(f"init_from {text!r} is neither a local model folder nor a shipped checkpoint — {hint}")


def check_report_to(names) -> None:
    """Refuse, before any work, a ``report_to`` integration whose package is not installed here (transformers would
    refuse it only when the Trainer is built, after the data and the model).

    Example::

        >>> from jacobiscope.recipes.sudoku import check_report_to
        >>> check_report_to([])                      # nothing to start
    """
    if not names:
        return
    from transformers.integrations import integration_utils

    for name in names:
        available = getattr(integration_utils, f"is_{name}_available", None)  # None: transformers checks it itself
        if available is not None and not available():
            raise RecipeError(f"report_to names {name!r}, whose package is not installed here — install it (pip "
                              f"install {name}), or drop {name!r} from report_to (--report-to none)")


def train_sudoku(recipe: SudokuRecipe, out_dir, *, resume: bool = True, data_path=None, progress: bool = True) -> dict:
    """Train ``recipe`` into ``out_dir`` (checkpoints, ``best/``, ``final/``, ``recipe.json``, accuracy history).

    Resumes from the newest complete checkpoint in ``out_dir`` unless ``resume=False``; ``progress=False`` hides the
    Trainer's progress bar. Returns a summary dict. One process trains a folder at a time: a second call on a folder
    that a live process is training raises `jacobiscope.FolderBusyError` before touching it.

    Before anything is written: the recipe is validated (`SudokuRecipe.validate`), ``init_from`` is resolved
    offline (`init_from_folder`), an ``out_dir`` that is or lies inside an input (the recipe file, the data, the
    ``init_from`` folder) is refused, and a resumed run's recipe is compared field by field with its recorded
    ``recipe.json`` (`RECIPE_FIELDS`): a change that cannot apply is refused with the fix, one that can is applied
    and recorded in ``recipe_changes.json``. ``best/`` is written atomically with a marker, and a resume repairs
    it from the checkpoint the validation history calls best (a kill between the two).
    """
    from .._locks import folder_lock

    if not isinstance(recipe, SudokuRecipe):
        raise RecipeError(f"train_sudoku expected a SudokuRecipe, got {type(recipe).__name__} — pass "
                          "SudokuRecipe(**fields) or SudokuRecipe.from_json('recipe.json')")
    for name, value in (("resume", resume), ("progress", progress)):
        if not isinstance(value, bool):
            raise RecipeError(f"train_sudoku's {name} must be True or False, got {value!r} — pass {name}=True or "
                              f"{name}=False")
    recipe.validate()  # again: fields set after construction (the command line's overrides) are checked too
    check_report_to(recipe.report_to)
    if data_path is not None and (isinstance(data_path, bytes) or not isinstance(data_path, (str, os.PathLike))):
        raise RecipeError(f"train_sudoku's data_path must be None or a path to satnet.csv.xz or its folder, got "
                          f"{type(data_path).__name__} — pass e.g. data_path='data/satnet.csv.xz'")
    out = _run_folder(out_dir)
    inputs = {"the recipe file": getattr(recipe, "source", None), "the training data": data_path}
    if recipe.init_from is not None:
        inputs["the init_from folder"] = init_from_folder(recipe.init_from)
    _refuse_output_inside_inputs(out, inputs)
    with folder_lock(out, "trained"):
        return _train_sudoku(recipe, out, resume=resume, data_path=data_path, progress=progress)


def _train_sudoku(recipe: SudokuRecipe, out_dir: Path, *, resume: bool, data_path, progress: bool) -> dict:
    checkpoint = _latest_checkpoint(out_dir, needs_average=recipe.ema_beta > 0) if resume else None
    # Compared with the run's recorded recipe before anything is written: a refused change leaves the run as it was.
    changes = _recipe_changes(out_dir, recipe, checkpoint) if checkpoint is not None else []
    diverged = out_dir / DivergenceCallback.FILE
    if resume and diverged.is_file() and (out_dir / "train_summary.json").is_file():
        # Resuming would start from weights whose next step overflows again: report the run as it ended.
        return _unapplied(dict(json.loads((out_dir / "train_summary.json").read_text()), already_finished=True),
                          changes)
    finished = _finished_summary(out_dir, checkpoint, recipe)
    if finished is not None:
        return _unapplied(finished, changes)
    if not resume:
        _clear_previous_run(out_dir)
    if changes:  # the log first: a kill before recipe.json is rewritten finds (and logs) the changes again
        _record_changes(out_dir, changes, checkpoint)
    atomic_write_text(out_dir / "recipe.json", json.dumps(asdict(recipe), indent=1))
    torch.manual_seed(recipe.seed)
    train_set = _training_set(recipe, out_dir, data_path, progress)
    validation = validation_puzzles(recipe)
    model = build_model(recipe)  # looked up here at call time: a caller may wrap it (the tests record the loops)
    model.compile_loop = recipe.compile_loop
    ema = _ema_callback(recipe)
    accuracy = _AccuracyCallback(*validation, ema, out_dir, recipe.validation_loops or [recipe.loops],
                                 validation_key=_validation_key(recipe))
    args, trainer_class = _training_arguments(recipe, out_dir, progress)
    diverged.unlink(missing_ok=True)
    _declare_checkpoint_format(out_dir, checkpoint)
    # A summary left by an earlier end (a time budget, a smaller max_steps) no longer describes a run that goes on.
    (out_dir / "train_summary.json").unlink(missing_ok=True)
    collator, random_streams = _collator(recipe, train_set, checkpoint)
    budget = TimeBudgetCallback(recipe.max_seconds) if recipe.max_seconds is not None else None
    # Order matters for a kill mid-save: the small files a resume needs first, the slow validation last.
    divergence = DivergenceCallback(out_dir)  # first: it puts finite weights back before the others see them
    schedule = _ScheduleCallback()  # a resumed run trains with this recipe's rate, warm-up and save/log steps
    dynamics = _dynamics_callback(recipe, validation[0])
    callbacks = [c for c in (divergence, schedule, ema, random_streams, budget, accuracy, dynamics) if c is not None]
    trainer = trainer_class(model=model, args=args, train_dataset=train_set, callbacks=callbacks,
                            data_collator=collator)
    for callback in (accuracy, dynamics):  # their numbers reach report_to through the trainer's own log
        if callback is not None:
            callback.bind(trainer)
    if ema is not None:
        ema.resume_from = checkpoint
    if checkpoint is not None:
        logger.info("resuming %s from %s", out_dir, checkpoint)
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(str(out_dir / "final"))
    logger.info("final weights written to %s", out_dir / "final")
    if ema is not None:
        final = copy.deepcopy(model)
        ema.swap_in(final)
        final.save_pretrained(out_dir / "final_ema")
    seconds = time.perf_counter() - started
    trained_here = result.global_step - random_streams.start_step  # a resumed run's earlier steps took no time here
    summary = {"steps": result.global_step, "train_loss": result.training_loss, "seconds": seconds,
               "steps_this_process": trained_here, "resumed_from": checkpoint,
               "best_validation_board_accuracy": accuracy.best,
               "puzzles_per_second": trained_here * recipe.batch_size / max(seconds, 1e-9)}
    if changes:
        summary["recipe_changes"] = [{k: c[k] for k in ("field", "old", "new")} for c in changes]
    if divergence.step is not None:
        summary["diverged"] = json.loads(diverged.read_text())
    atomic_write_text(out_dir / "train_summary.json", json.dumps(summary, indent=1))
    logger.info("trained %s to step %d in %.0f s", out_dir, result.global_step, seconds)
    return summary


def _training_set(recipe: SudokuRecipe, out_dir: Path, data_path, progress: bool):
    """The training rows as the Trainer reads them: SATNet rows 0-8999 (the first ``train_limit``), the generated
    "general" puzzles before them if the recipe asks, augmented or plain tensors."""
    from ..data import sudoku as data

    train_set, _ = data.satnet_splits(data_path, limit=None)  # the test rows are never read here
    if recipe.train_limit is not None:
        if recipe.train_limit > len(train_set):
            warnings.warn(f"train_limit={recipe.train_limit} is more than the {len(train_set)} training rows: all "
                          f"{len(train_set)} are used — set train_limit=null (or <= {len(train_set)})", UserWarning,
                          stacklevel=4)
        train_set = train_set.select(range(min(recipe.train_limit, len(train_set))))
    if recipe.train_data == "general":
        from datasets import concatenate_datasets

        train_set = concatenate_datasets([general_training_puzzles(recipe, out_dir, progress=progress), train_set])
    if recipe.augment:
        return data.augmented_dataset(train_set, seed=recipe.seed)
    return train_set.with_format("torch", columns=["input_ids", "labels"])


def _ema_callback(recipe: SudokuRecipe) -> EMACallback | None:
    """The weight average the recipe asks for (None for ``ema_beta=0``); warns when it would never start."""
    if recipe.ema_beta <= 0:
        return None
    if 0 < recipe.max_steps <= recipe.ema_start:
        # The average starts after the last step: final_ema/ would hold the starting weights, never a trained one.
        warnings.warn(f"ema_start={recipe.ema_start} is at or after max_steps={recipe.max_steps}: the weight average "
                      "never starts, so final_ema/ holds the untrained starting weights — lower ema_start (e.g. "
                      f"{recipe.max_steps // 10}) or set ema_beta=0", UserWarning, stacklevel=3)
    return EMACallback(recipe.ema_beta, recipe.ema_every, recipe.ema_start)


def _dynamics_callback(recipe: SudokuRecipe, puzzles):
    """The Lyapunov / ||J|| / regime monitor on the first validation puzzles (None without ``dynamics_every``)."""
    if recipe.dynamics_every is None:
        return None
    from ..training import LyapunovCallback

    return LyapunovCallback(puzzles[:DYNAMICS_PUZZLES], steps=DYNAMICS_LOOPS, transient=DYNAMICS_TRANSIENT,
                            every_steps=recipe.dynamics_every)


class _SudokuTrainer(StopAtMaxStepsMixin, Trainer):
    """The plain Trainer, except that a run resumed from its last checkpoint trains no step past ``max_steps``."""


def _training_arguments(recipe: SudokuRecipe, out_dir: Path, progress: bool):
    """``(TrainingArguments, Trainer class)`` for the recipe: the regularized pair when a regularizer weight is set."""
    arguments_class, trainer_class, regularizer_options = TrainingArguments, _SudokuTrainer, {}
    if recipe.regularized():
        from ..training import SpectralRegTrainer, SpectralRegTrainingArguments

        arguments_class, trainer_class = SpectralRegTrainingArguments, SpectralRegTrainer
        regularizer_options = {"spec_reg_weight": recipe.spec_reg_weight,
                               "jacobian_reg_weight": recipe.jacobian_reg_weight,
                               "energy_reg": recipe.energy_reg, "energy_reg_weight": recipe.energy_reg_weight}
    args = arguments_class(
        **regularizer_options,
        output_dir=str(out_dir),
        per_device_train_batch_size=recipe.batch_size,
        learning_rate=recipe.learning_rate,
        num_train_epochs=recipe.epochs,
        max_steps=recipe.max_steps,
        warmup_steps=recipe.warmup_steps,
        lr_scheduler_type="constant_with_warmup",
        max_grad_norm=recipe.max_grad_norm,
        weight_decay=recipe.weight_decay,
        save_steps=recipe.save_steps,
        save_total_limit=2,
        logging_steps=recipe.logging_steps,
        seed=recipe.seed,
        use_cpu=not torch.cuda.is_available(),
        report_to=list(recipe.report_to),
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=not progress,
        bf16=recipe.bf16,
    )
    return args, trainer_class


def _collator(recipe: SudokuRecipe, train_set, checkpoint: str | None):
    """The batch collator (drawing each batch's loop count) and the callback that saves and restores its random
    stream with the augmentation's, so a resumed run draws what the uninterrupted one would have."""
    low, high = recipe.training_loops()
    collator = LoopCountCollator(low, high, seed=recipe.seed, supervise_every=recipe.supervise_every)
    streams = {"loop_counts": collator}
    if getattr(train_set, "augmentation_stream", None) is not None:
        streams["augmentation"] = train_set.augmentation_stream
    random_streams = RandomStreamsCallback(streams, checkpoint)
    collator.after_batch = random_streams.record
    return collator, random_streams
