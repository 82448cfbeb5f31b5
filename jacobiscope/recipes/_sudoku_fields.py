"""The fields of a Sudoku recipe: each one's check (type, range, budget) and what a change does to a resumed run.

Example::

    >>> from jacobiscope.recipes._sudoku_fields import RECIPE_FIELDS
    >>> check, on_resume = RECIPE_FIELDS["loops"]
    >>> check("loops", 32), on_resume
    (32, 'apply')
    >>> check("loops", 0)
    Traceback (most recent call last):
    ...
    jacobiscope.errors.RecipeError: recipe field loops must be an int in [1, 1024], got 0 — set loops within that range
"""
from __future__ import annotations

import difflib
import json
import math
import operator
import os

from ..errors import RecipeError

__all__ = ["RECIPE_FIELDS", "MAX_LOOPS", "MAX_HIDDEN_SIZE", "MAX_BATCH_SIZE", "MAX_VALIDATION_PUZZLES",
           "MAX_GENERAL_PUZZLES", "MAX_STEPS", "MAX_SEED"]


# Budgets: sizes a recipe may ask for before training is refused up front (a run never starts only to hang or to
# run out of memory minutes later). Raise them by editing the recipe's intent, not the library.
MAX_LOOPS = 1024            # loops, loops_min/max, validation_loops: each training step runs up to this many loops
MAX_HIDDEN_SIZE = 8192
MAX_BATCH_SIZE = 16_384
MAX_VALIDATION_PUZZLES = 10_000   # generated once (~17 ms each), solved at every save
MAX_GENERAL_PUZZLES = 1_000_000   # generated in resumable parts (~50 ms each)
MAX_STEPS = 10**9
MAX_SEED = 2**32 - 1        # numpy's limit (the Trainer seeds numpy with it)

_LOOPS_WHY = "every training step or validation solve runs this many loops"


def _fail(name, value, expected, fix):
    raise RecipeError(f"recipe field {name} must be {expected}, got {value!r} — {fix}")


def _int_field(low, high, *, optional=False, allow=(), budget=None):
    def check(name, value):
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value_int = None if isinstance(value, (bool, float, str)) else operator.index(value)
            except TypeError:
                value_int = None
            if value_int is None:
                hint = f" (write {int(value)} without quotes or decimals)" if _integral(value) else ""
                _fail(name, value, f"an int{' or null' if optional else ''}", f"set {name} to an int in [{low}, "
                      f"{high}]{hint}")
            value = value_int
        if value in allow:
            return value
        if budget is not None and value > high:
            _fail(name, value, f"at most {high} (the budget: {budget})", f"set {name} <= {high}, or split the work")
        if not low <= value <= high:
            extra = f" or {', '.join(map(str, allow))}" if allow else ""
            fix = f"set {name} within that range" + (" (-1: train for `epochs`)" if -1 in allow else "")
            _fail(name, value, f"an int in [{low}, {high}]{extra}", fix)
        return value
    return check


def _integral(value) -> bool:
    try:
        return not isinstance(value, bool) and float(value) == int(float(value))
    except (TypeError, ValueError, OverflowError):
        return False


def _float_field(low, high, *, low_open=False, high_open=False, optional=False):
    def check(name, value):
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(name, value, "a number", f"set {name} to a number (not a string or a bool)")
        value = float(value)
        left = value > low if low_open else value >= low
        right = value < high if high_open else value <= high
        if not math.isfinite(value) or not (left and right):
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            _fail(name, value, f"a finite number in {interval}", f"set {name} within that range")
        return value
    return check


def _bool_field(name, value):
    if not isinstance(value, bool):
        _fail(name, value, "true or false", f"set {name} to true or false (not {type(value).__name__})")
    return value


def _choice_field(*options, optional=False):
    def check(name, value):
        if (value is None and optional) or (isinstance(value, str) and value in options):
            return value
        shown = " or ".join(repr(option) for option in (*options, *((None,) if optional else ())))
        lowered = {option.lower(): option for option in options}
        close = [lowered[match] for match in difflib.get_close_matches(str(value).lower(), list(lowered), n=1)]
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {shown}"
        _fail(name, value, shown, hint)
    return check


def _givens_field(name, value):
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or len(value) != 2:
        _fail(name, value, "a pair [low, high] of givens counts", f"set {name} to e.g. [31, 42]")
    low, high = (_int_field(22, 81)(f"{name}[{i}]", v) for i, v in enumerate(value))
    if low > high:
        _fail(name, value, "[low, high] with low <= high", f"swap them: [{high}, {low}]")
    return (low, high)


def _loops_list_field(name, value):
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 64:
        _fail(name, value, "null or a list of 1 to 64 loop counts", f"set {name} to e.g. [16, 32]")
    return [_int_field(1, MAX_LOOPS, budget=_LOOPS_WHY)(f"{name}[{i}]", v) for i, v in enumerate(value)]


def _init_from_field(name, value):
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not str(os.fspath(value)).strip():
        _fail(name, value, "null, a local model folder or a shipped checkpoint name",
              "set it to a folder saved with save_pretrained (or null to train from scratch)")
    return os.fspath(value)


def _integration_names() -> list[str]:
    """The names ``transformers.TrainingArguments(report_to=...)`` accepts (imported only when a name is given)."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    return sorted(INTEGRATION_TO_CALLBACK) + ["all"]


def _report_to_field(name, value):
    """``report_to``: a list of transformers' reporting integrations; ``"tensorboard"`` alone, ``"none"`` and null
    are read as ``["tensorboard"]``, ``[]`` and ``[]``."""
    if value is None or value == "none":
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) and item.strip() for item in value):
        _fail(name, value, 'a list of reporting integrations, e.g. ["tensorboard"]',
              f'set {name} to e.g. ["tensorboard"], ["wandb"] or [] (none)')
    names = [item for item in dict.fromkeys(value) if item != "none"]
    if names:
        known = _integration_names()
        for item in names:
            if item not in known:
                close = difflib.get_close_matches(item, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"use some of {', '.join(known)}"
                _fail(name, value, "names of transformers' reporting integrations", hint)
    return names


def _extra_field(name, value):
    if not isinstance(value, dict):
        _fail(name, value, "a dict (free-form notes)", f"set {name} to {{}} or a dict of notes")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        _fail(name, value, "a dict of JSON values (recorded in recipe.json)", f"drop what JSON cannot hold ({error})")
    return value


# What a changed value does to a run that resumes (compared field by field with the run's recipe.json):
#   "model"    refused: the checkpoint's weights have another shape or meaning;
#   "start"    refused: read only when a run starts (the seed, the initial weights); a resumed run cannot apply it;
#   "data"     refused: the resumed epoch position counts batches of the recorded training data;
#   "restored" refused: the optimizer state restored from the checkpoint would override it;
#   "apply"    applied from the resumed step on, and recorded in recipe_changes.json (learning_rate and
#              warmup_steps are put into the restored optimizer and scheduler by `_ScheduleCallback`);
#   "call"     holds for this call only (a wall-clock budget): each resume brings its own, so it is not compared.
RECIPE_FIELDS: dict = {
    "arch": (_choice_field("itrsa", "akorn"), "model"),
    "hidden_size": (_int_field(1, MAX_HIDDEN_SIZE, budget="memory per cell"), "model"),
    "num_heads": (_int_field(1, MAX_HIDDEN_SIZE), "model"),
    "loops": (_int_field(1, MAX_LOOPS, budget=_LOOPS_WHY), "apply"),
    "eta": (_float_field(0.0, 100.0, low_open=True), "model"),
    "norm": (_choice_field("rmsnorm", "layernorm", "none"), "model"),
    "attention": (_choice_field("standard", "e_single", "e_multi"), "model"),
    "attend_self": (_bool_field, "model"),
    "mlp_ratio": (_int_field(0, 64), "model"),
    "initializer_range": (_float_field(0.0, 10.0, low_open=True), "start"),
    "oscillator_dim": (_int_field(2, MAX_HIDDEN_SIZE), "model"),
    "oscillator_norm": (_bool_field, "model"),
    "unit_embeddings": (_bool_field, "model"),
    "learning_rate": (_float_field(0.0, 10.0, low_open=True), "apply"),
    "batch_size": (_int_field(1, MAX_BATCH_SIZE, budget="memory per step"), "data"),
    "epochs": (_float_field(0.0, 1e6, low_open=True), "apply"),
    "max_steps": (_int_field(1, MAX_STEPS, allow=(-1,)), "apply"),
    "warmup_steps": (_int_field(0, MAX_STEPS), "apply"),
    "max_grad_norm": (_float_field(0.0, 1e6), "apply"),
    "weight_decay": (_float_field(0.0, 1.0), "restored"),
    "augment": (_bool_field, "data"),
    "ema_beta": (_float_field(0.0, 1.0, high_open=True), "apply"),
    "ema_every": (_int_field(1, MAX_STEPS), "apply"),
    "ema_start": (_int_field(0, MAX_STEPS), "apply"),
    "seed": (_int_field(0, MAX_SEED), "start"),
    "train_limit": (_int_field(1, MAX_STEPS, optional=True), "data"),
    "init_from": (_init_from_field, "start"),
    "eval_limit": (_int_field(1, MAX_VALIDATION_PUZZLES, budget="validation puzzles are generated at ~17 ms each and solved at every save"), "apply"),
    "loops_min": (_int_field(1, MAX_LOOPS, optional=True, budget=_LOOPS_WHY), "apply"),
    "loops_max": (_int_field(1, MAX_LOOPS, optional=True, budget=_LOOPS_WHY), "apply"),
    "supervise_every": (_int_field(1, MAX_LOOPS, optional=True), "apply"),
    "validation_givens": (_givens_field, "apply"),
    "validation_seed": (_int_field(0, MAX_SEED), "apply"),
    "validation_loops": (_loops_list_field, "apply"),
    "max_seconds": (_float_field(0.0, 1e9, optional=True), "call"),
    "train_data": (_choice_field("satnet", "general"), "data"),
    "general_puzzles": (_int_field(1, MAX_GENERAL_PUZZLES, budget="generated at ~50 ms each"), "data"),
    "general_givens": (_givens_field, "data"),
    "general_seed": (_int_field(0, MAX_SEED), "data"),
    "bf16": (_bool_field, "apply"),
    "compile_loop": (_bool_field, "apply"),
    "save_steps": (_int_field(1, MAX_STEPS), "apply"),
    "logging_steps": (_int_field(1, MAX_STEPS), "apply"),
    "spec_reg_weight": (_float_field(0.0, 1e6), "apply"),
    "jacobian_reg_weight": (_float_field(0.0, 1e6), "apply"),
    "energy_reg": (_choice_field("e_single", "e_multi", optional=True), "apply"),
    "energy_reg_weight": (_float_field(0.0, 1e6), "apply"),
    "report_to": (_report_to_field, "apply"),
    "dynamics_every": (_int_field(1, MAX_STEPS, optional=True), "apply"),
    "extra": (_extra_field, "apply"),
}

_WHY = {"model": "the checkpoint's weights were trained with the recorded value (another shape or model)",
        "start": "it is read only when a run starts, so a resumed run cannot apply it",
        "data": "the resumed position in the epoch counts batches of the recorded training data",
        "restored": "the optimizer state restored from the checkpoint would keep the recorded value"}
