"""Train and evaluate the reference Sudoku solvers with `transformers.Trainer` (the benchmark protocol of AKOrN and
of Tomihari & Karakida: train on SATNet rows 0-8999, test in-distribution on rows 9000-9999 and out-of-distribution on
the RRN test set)."""
from __future__ import annotations

import copy
import difflib
import functools
import json
import math
import operator
import os
import re
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from .._io import atomic_write_text
from ..errors import ArgumentError, JacobiscopeError
from ._sudoku_callbacks import (
    DivergenceCallback, EMACallback, RandomStreamsCallback, TimeBudgetCallback, _AccuracyCallback,
    _declare_checkpoint_format, _latest_checkpoint,
)

__all__ = ["SudokuRecipe", "RecipeError", "RECIPE_FIELDS", "train_sudoku", "evaluate_sudoku", "predict_along", "puzzle_records", "EMACallback",
           "build_model", "LoopCountCollator", "validation_puzzles", "general_training_puzzles", "TimeBudgetCallback"]


# ------------------------------------------------------------------------------------------------ recipe checks
class RecipeError(JacobiscopeError, ValueError):
    """A Sudoku recipe is unusable: a value of the wrong type or out of range, an unknown key, an unreadable recipe
    file, an output folder inside the run's inputs, or a resumed run whose recipe changes what cannot change."""


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
#              warmup_steps are put into the restored optimizer and scheduler by `_ScheduleCallback`).
RECIPE_FIELDS: dict = {
    "arch": (_choice_field("itrsa", "akorn"), "model"),
    "hidden_size": (_int_field(1, MAX_HIDDEN_SIZE, budget="memory per cell"), "model"),
    "num_heads": (_int_field(1, MAX_HIDDEN_SIZE), "model"),
    "loops": (_int_field(1, MAX_LOOPS, budget=_LOOPS_WHY), "apply"),
    "eta": (_float_field(0.0, 100.0, low_open=True), "model"),
    "norm": (_choice_field("rmsnorm", "layernorm", "none"), "model"),
    "attention": (_choice_field("standard", "e_single", "e_multi"), "model"),
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
    "max_seconds": (_float_field(0.0, 1e9, optional=True), "apply"),
    "train_data": (_choice_field("satnet", "general"), "data"),
    "general_puzzles": (_int_field(1, MAX_GENERAL_PUZZLES, budget="generated at ~50 ms each"), "data"),
    "general_givens": (_givens_field, "data"),
    "general_seed": (_int_field(0, MAX_SEED), "data"),
    "bf16": (_bool_field, "apply"),
    "save_steps": (_int_field(1, MAX_STEPS), "apply"),
    "logging_steps": (_int_field(1, MAX_STEPS), "apply"),
    "spec_reg_weight": (_float_field(0.0, 1e6), "apply"),
    "jacobian_reg_weight": (_float_field(0.0, 1e6), "apply"),
    "energy_reg": (_choice_field("e_single", "e_multi", optional=True), "apply"),
    "energy_reg_weight": (_float_field(0.0, 1e6), "apply"),
    "extra": (_extra_field, "apply"),
}

_WHY = {"model": "the checkpoint's weights were trained with the recorded value (another shape or model)",
        "start": "it is read only when a run starts, so a resumed run cannot apply it",
        "data": "the resumed position in the epoch counts batches of the recorded training data",
        "restored": "the optimizer state restored from the checkpoint would keep the recorded value"}


@dataclass
class SudokuRecipe:
    """Everything a training run needs; saved as ``recipe.json`` beside the checkpoints.

    Example::

        >>> from jacobiscope.recipes.sudoku import SudokuRecipe
        >>> SudokuRecipe(arch="akorn", hidden_size=64).model_config()["oscillator_dim"]
        4
    """

    arch: str = "itrsa"  # "itrsa" | "akorn"
    hidden_size: int = 128
    num_heads: int = 8
    loops: int = 16
    eta: float = 1.0  # itrsa
    norm: str = "rmsnorm"  # itrsa
    attention: str = "standard"  # itrsa
    mlp_ratio: int = 0  # itrsa
    initializer_range: float = 0.02  # itrsa
    oscillator_dim: int = 4  # akorn
    oscillator_norm: bool = False  # akorn
    unit_embeddings: bool = False  # akorn
    learning_rate: float = 1e-3
    batch_size: int = 64
    epochs: float = 100.0
    max_steps: int = -1
    warmup_steps: int = 200
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    augment: bool = True
    ema_beta: float = 0.995
    ema_every: int = 10
    ema_start: int = 100
    seed: int = 0
    train_limit: int | None = None  # first n training rows (tests, smoke runs)
    init_from: str | None = None  # fine-tune: start from these weights (a folder or shipped name), not from scratch
    eval_limit: int = 500  # validation puzzles scored at each checkpoint (never test puzzles)
    # Training loop counts: each batch draws T uniformly from [loops_min, loops_max] (odd values included), so the
    # model cannot lean on one loop count or its parity; None trains at `loops` only.
    loops_min: int | None = None
    loops_max: int | None = None
    # Deep supervision: also score the readout after every `supervise_every` loops (None: the last loop only).
    supervise_every: int | None = None
    # Checkpoint selection on fresh generated puzzles (never on SATNet test or RRN): givens range, seed, and the
    # loop counts whose mean board accuracy is the score (default: [loops]).
    validation_givens: tuple = (31, 42)
    validation_seed: int = 20_261_201
    validation_loops: list | None = None
    # Stop (and save) once training has run this many seconds in this process: a run that must end inside a session
    # or a GPU lease ends with a checkpoint, and the next call resumes from it. None: no limit.
    max_seconds: float | None = None
    # Training data: "satnet" (rows 0-8999, the AKOrN / paper protocol) or "general" (`general_puzzles` puzzles from
    # the library's generator, givens drawn from `general_givens`, plus SATNet rows 0-8999; cached in the run folder).
    train_data: str = "satnet"
    general_puzzles: int = 30_000
    general_givens: tuple = (22, 45)
    general_seed: int = 7
    # Mixed precision: bf16 autocast (CPU with AMX, or GPU); the weights and the optimizer stay in fp32.
    bf16: bool = False
    save_steps: int = 500
    logging_steps: int = 50
    # Regularizers (any non-zero weight trains with SpectralRegTrainer; see SpectralRegTrainingArguments).
    spec_reg_weight: float = 0.0
    jacobian_reg_weight: float = 0.0
    energy_reg: str | None = None  # None | "e_single" | "e_multi"
    energy_reg_weight: float = 0.0
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    def validate(self) -> "SudokuRecipe":
        """Check every field (type, range, budget) and the fields that must agree; return the recipe.

        Raises `RecipeError` naming the field, what came and the fix. Called on construction and again by
        `train_sudoku` (a field set after construction is checked before any work). Tuples and lists normalize
        (``validation_givens`` is a tuple, ``validation_loops`` a list).

        Example::

            >>> from jacobiscope.recipes.sudoku import SudokuRecipe
            >>> SudokuRecipe(hidden_size=30, num_heads=8)
            Traceback (most recent call last):
            ...
            jacobiscope.recipes.sudoku.RecipeError: recipe: hidden_size=30 must be divisible by num_heads=8 — pick a hidden_size that is a multiple of num_heads (e.g. 32)
        """
        for item in fields(self):
            check, _policy = RECIPE_FIELDS[item.name]
            object.__setattr__(self, item.name, check(item.name, getattr(self, item.name)))
        hidden, heads = self.hidden_size, self.num_heads
        if hidden % heads:
            raise RecipeError(f"recipe: hidden_size={hidden} must be divisible by num_heads={heads} — pick a "
                              f"hidden_size that is a multiple of num_heads (e.g. {heads * -(-hidden // heads)})")
        if self.arch == "akorn":
            if (hidden // heads) % 4:
                raise RecipeError(f"recipe: akorn needs hidden_size / num_heads to be a multiple of 4 (2-D rotary), "
                                  f"got {hidden} / {heads} = {hidden // heads} — change hidden_size or num_heads")
            if self.oscillator_dim % 2 or hidden % self.oscillator_dim:
                raise RecipeError(f"recipe: akorn needs an even oscillator_dim that divides hidden_size, got "
                                  f"oscillator_dim={self.oscillator_dim}, hidden_size={hidden} — e.g. oscillator_dim=4")
        self.training_loops()
        if (self.energy_reg is None) != (self.energy_reg_weight == 0):
            raise RecipeError(f"recipe: energy_reg={self.energy_reg!r} with energy_reg_weight={self.energy_reg_weight!r} "
                              "does nothing — set both (e.g. energy_reg='e_multi', energy_reg_weight=0.01) or neither")
        if self.energy_reg is not None and self.arch != "itrsa":
            raise RecipeError(f"recipe: energy_reg={self.energy_reg!r} needs arch 'itrsa' (it reads the attention "
                              f"weights), got arch={self.arch!r} — set energy_reg to null")
        return self

    def training_loops(self) -> tuple[int, int]:
        """The inclusive range of loop counts drawn for a training batch."""
        low = self.loops if self.loops_min is None else self.loops_min
        high = self.loops if self.loops_max is None else self.loops_max
        if not 1 <= low <= high:
            shown = (f"loops_min={self.loops_min}{' (null: loops)' if self.loops_min is None else ''}, loops_max="
                     f"{self.loops_max}{' (null: loops)' if self.loops_max is None else ''}, loops={self.loops}")
            raise RecipeError(f"loops_min/loops_max must satisfy 1 <= loops_min <= loops_max, got {low}, {high} "
                              f"({shown}) — swap them, or set both to null to train at loops only")
        return low, high

    def regularized(self) -> bool:
        return bool(self.spec_reg_weight or self.jacobian_reg_weight or (self.energy_reg and self.energy_reg_weight))

    def model_config(self) -> dict:
        if self.arch == "itrsa":
            return {"hidden_size": self.hidden_size, "num_heads": self.num_heads, "loops": self.loops, "eta": self.eta,
                    "norm": self.norm, "attention": self.attention, "mlp_ratio": self.mlp_ratio,
                    "initializer_range": self.initializer_range}
        if self.arch == "akorn":
            return {"hidden_size": self.hidden_size, "num_heads": self.num_heads, "loops": self.loops,
                    "oscillator_dim": self.oscillator_dim, "oscillator_norm": self.oscillator_norm,
                    "unit_embeddings": self.unit_embeddings}
        raise RecipeError(f"arch must be 'itrsa' or 'akorn', got {self.arch!r} — set arch to one of them")

    @classmethod
    def from_json(cls, path) -> "SudokuRecipe":
        """Read a recipe file (UTF-8 JSON, a byte-order mark allowed); every problem is a `RecipeError` (a missing
        file a `jacobiscope.PathError`) naming the file, the key and the fix."""
        import errno

        from .._io import path_error

        if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or not str(os.fspath(path)).strip():
            raise RecipeError(f"SudokuRecipe.from_json expected the path of a recipe JSON file, got {path!r} — pass "
                              "e.g. 'recipe.json'")
        file = Path(path).expanduser()
        if file.is_dir():
            raise path_error(errno.EISDIR, f"recipe {str(path)!r} is a folder, not a recipe file — pass the JSON file "
                                           "(a run folder's recipe is <folder>/recipe.json)")
        try:
            raw = file.read_bytes()
        except FileNotFoundError:
            raise path_error(errno.ENOENT, f"recipe file {str(path)!r} does not exist — check the path") from None
        except OSError as error:
            raise path_error(error.errno, f"recipe file {str(path)!r} cannot be read ({error.strerror or error}) — "
                                          "check the path and its permissions") from None
        try:
            text = raw.decode("utf-8-sig")  # an editor's byte-order mark is not part of the JSON
        except UnicodeDecodeError as error:
            raise RecipeError(f"recipe file {str(path)!r} is not UTF-8 text (byte {error.start}) — save it as UTF-8 "
                              "JSON") from None
        try:
            data = json.loads(text)
        except ValueError as error:
            where = f"line {error.lineno}, column {error.colno}: {error.msg}" if hasattr(error, "lineno") else str(error)
            raise RecipeError(f"recipe file {str(path)!r} is not valid JSON ({where}) — fix the JSON, e.g. "
                              '{"arch": "itrsa", "max_steps": 1000}') from None
        if not isinstance(data, dict):
            raise RecipeError(f"recipe file {str(path)!r} holds a JSON {type(data).__name__}, not an object of recipe "
                              'fields — write e.g. {"arch": "itrsa", "max_steps": 1000}')
        known = [f.name for f in fields(cls)]
        unknown = [key for key in data if key not in known]
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(str(key), known, n=1)
                hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
            raise RecipeError(f"recipe file {str(path)!r} has unknown key(s) {', '.join(hints)} — fix the key; the "
                              f"fields are those of SudokuRecipe: {', '.join(known)}")
        recipe = cls(**data)
        recipe.source = file  # not a field: lets train_sudoku refuse an output folder that is this file
        return recipe


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


GENERAL_PART_ROWS = 1000


def general_training_puzzles(recipe: SudokuRecipe, folder, *, progress: bool | None = None):
    """The generated part of the "general" training data: ``recipe.general_puzzles`` unique puzzles, givens drawn
    uniformly from ``recipe.general_givens``, as a Dataset; written to ``folder/general/part-*.csv.xz`` in parts of
    1,000 (atomically), so an interrupted generation resumes where it stopped and a resumed run reads the same puzzles.

    Puzzles whose base grid (`jacobiscope.data.sudoku.grid_key`) occurs in a test set (SATNet test rows, RRN test) or
    among the validation puzzles are dropped; their count is written to ``folder/general/leakage.json``.
    """
    import lzma

    from .._io import atomic_write_bytes
    from .._progress import progress_bar
    from ..data import sudoku as data

    parts_dir = Path(folder) / "general"
    parts_dir.mkdir(parents=True, exist_ok=True)
    parts = -(-recipe.general_puzzles // GENERAL_PART_ROWS)
    low, high = (int(v) for v in recipe.general_givens)
    with progress_bar(recipe.general_puzzles, "generating training puzzles", unit="puzzle",
                      enabled=False if progress is False else None) as bar:
        for part in range(parts):
            path = parts_dir / f"part-{part:05d}.csv.xz"
            rows = min(GENERAL_PART_ROWS, recipe.general_puzzles - part * GENERAL_PART_ROWS)
            if not path.exists():
                # One seed per part: the parts are the same whichever session generates them.
                puzzles, solutions = data.generate_many(rows, givens=(low, high), seed=recipe.general_seed * 100_003 + part)
                text = "".join(f"{p},{q}\n" for p, q in zip(puzzles, solutions))
                atomic_write_bytes(path, lzma.compress(text.encode()))
            bar.update(rows)
    frames = [data.load_csv(parts_dir / f"part-{part:05d}.csv.xz", header=False) for part in range(parts)]
    from datasets import concatenate_datasets

    generated = concatenate_datasets(frames)
    forbidden = _test_grid_keys() | {data.grid_key(grid) for grid in data.to_strings(validation_puzzles(recipe)[1])}
    leaked = {index for index, grid in enumerate(generated["solution"]) if data.grid_key(grid) in forbidden}
    atomic_write_text(parts_dir / "leakage.json", json.dumps({"generated": len(generated), "dropped": len(leaked),
                                                              "checked_against": ["SATNet test", "RRN test",
                                                                                  "validation"]}))
    if leaked:
        generated = generated.select([i for i in range(len(generated)) if i not in leaked])
    return generated


@functools.lru_cache(maxsize=1)
def _test_grid_keys() -> frozenset:
    """`grid_key` of every SATNet test and RRN test solution (19,000 grids, a few seconds): once per process."""
    from ..data import sudoku as data

    _, satnet_test = data.satnet_splits()
    return frozenset(data.grid_key(grid) for grid in [*satnet_test["solution"], *data.rrn_test()["solution"]])


class LoopCountCollator:
    """Batches Sudoku rows and draws the batch's loop count uniformly from ``[low, high]``.

    Example::

        >>> import torch
        >>> from jacobiscope.recipes.sudoku import LoopCountCollator
        >>> collate = LoopCountCollator(3, 5, seed=0)
        >>> rows = [{"input_ids": torch.zeros(81, dtype=torch.long), "labels": torch.ones(81, dtype=torch.long)}] * 2
        >>> batch = collate(rows)
        >>> batch["input_ids"].shape, 3 <= batch["loops"] <= 5
        (torch.Size([2, 81]), True)

    The Trainer passes ``loops`` to the model's forward with the batch, so a model trained this way sees odd and even
    loop counts alike (a fixed T lets it learn, say, a period-2 orbit that is right only at even T).
    """

    def __init__(self, low: int, high: int, seed: int = 0, supervise_every: int | None = None):
        import random

        self.low, self.high = int(low), int(high)
        self.supervise_every = supervise_every
        self.rng = random.Random(seed)
        self.after_batch = None  # called after each batch (RandomStreamsCallback records the streams' states)

    def __call__(self, features: list[dict]) -> dict:
        batch = {key: torch.stack([torch.as_tensor(row[key], dtype=torch.long) for row in features])
                 for key in ("input_ids", "labels")}
        if self.high > self.low:
            batch["loops"] = self.rng.randint(self.low, self.high)
        else:
            batch["loops"] = self.low
        if self.supervise_every:
            batch["supervise_every"] = int(self.supervise_every)
        if self.after_batch is not None:
            self.after_batch()
        return batch


def validation_puzzles(recipe: SudokuRecipe) -> tuple[torch.Tensor, torch.Tensor]:
    """The checkpoint-selection puzzles: ``eval_limit`` fresh puzzles from the generator (unique solutions,
    ``validation_givens``, ``validation_seed``), so no test puzzle is ever used to choose weights."""
    from ..data import sudoku as data

    low, high = recipe.validation_givens
    puzzles, solutions = data.generate_many(recipe.eval_limit, givens=(int(low), int(high)), seed=recipe.validation_seed)
    return data.to_tensor(puzzles), data.to_tensor(solutions)


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
        if old == new:
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


def _train_sudoku(recipe: SudokuRecipe, out_dir: Path, *, resume: bool, data_path, progress: bool) -> dict:
    from ..data import sudoku as data

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
    train_set, _ = data.satnet_splits(data_path, limit=None)  # the test rows are never read here
    if recipe.train_limit is not None:
        if recipe.train_limit > len(train_set):
            warnings.warn(f"train_limit={recipe.train_limit} is more than the {len(train_set)} training rows: all "
                          f"{len(train_set)} are used — set train_limit=null (or <= {len(train_set)})", UserWarning,
                          stacklevel=3)
        train_set = train_set.select(range(min(recipe.train_limit, len(train_set))))
    if recipe.train_data == "general":
        from datasets import concatenate_datasets

        train_set = concatenate_datasets([general_training_puzzles(recipe, out_dir, progress=progress), train_set])
    if recipe.augment:
        train_set = data.augmented_dataset(train_set, seed=recipe.seed)
    else:
        train_set = train_set.with_format("torch", columns=["input_ids", "labels"])
    low, high = recipe.training_loops()
    validation = validation_puzzles(recipe)

    model = build_model(recipe)
    ema = EMACallback(recipe.ema_beta, recipe.ema_every, recipe.ema_start) if recipe.ema_beta > 0 else None
    if ema is not None and 0 < recipe.max_steps <= recipe.ema_start:
        # The average starts after the last step: final_ema/ would hold the starting weights, never a trained one.
        warnings.warn(f"ema_start={recipe.ema_start} is at or after max_steps={recipe.max_steps}: the weight average "
                      "never starts, so final_ema/ holds the untrained starting weights — lower ema_start (e.g. "
                      f"{recipe.max_steps // 10}) or set ema_beta=0", UserWarning, stacklevel=2)
    accuracy = _AccuracyCallback(*validation, ema, out_dir, recipe.validation_loops or [recipe.loops],
                                 validation_key=_validation_key(recipe))
    arguments_class, trainer_class, regularizer_options = TrainingArguments, Trainer, {}
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
        report_to=[],
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=not progress,
        bf16=recipe.bf16,
    )
    diverged.unlink(missing_ok=True)
    _declare_checkpoint_format(out_dir, checkpoint)
    # A summary left by an earlier end (a time budget, a smaller max_steps) no longer describes a run that goes on.
    (out_dir / "train_summary.json").unlink(missing_ok=True)
    budget = TimeBudgetCallback(recipe.max_seconds) if recipe.max_seconds is not None else None
    collator = LoopCountCollator(low, high, seed=recipe.seed, supervise_every=recipe.supervise_every)
    streams = {"loop_counts": collator}
    if getattr(train_set, "augmentation_stream", None) is not None:
        streams["augmentation"] = train_set.augmentation_stream
    random_streams = RandomStreamsCallback(streams, checkpoint)
    collator.after_batch = random_streams.record
    # Order matters for a kill mid-save: the small files a resume needs first, the slow validation last.
    divergence = DivergenceCallback(out_dir)  # first: it puts finite weights back before the others see them
    schedule = _ScheduleCallback()  # a resumed run trains with this recipe's rate, warm-up and save/log steps
    callbacks = [c for c in (divergence, schedule, ema, random_streams, budget, accuracy) if c is not None]
    trainer = trainer_class(model=model, args=args, train_dataset=train_set, callbacks=callbacks,
                            data_collator=collator)
    if ema is not None:
        ema.resume_from = checkpoint
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(str(out_dir / "final"))
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


def predict_along(model, puzzles, loops=(16, 32, 64, 128), votes: int = 1, batch_size: int = 500, *,
                  progress: bool | None = False, desc: str = "sudoku eval") -> dict:
    """The model's completed grids at every loop count in ``loops``: ``{T: [N, 81]}``, one trajectory per puzzle.

    Uses the model's ``solve_along`` (read out along a single run: the cost of ``max(loops)`` loops), else one
    ``solve`` per loop count. ``progress`` shows a bar on stderr counting puzzles (``None``: once the run has taken
    2 s; ``False``: never). AKOrN's noise draws restart from its seed in every batch of ``batch_size`` puzzles.
    """
    from .._progress import progress_bar
    from ._eval_checks import check_batch_size, check_solver, check_votes, loop_counts

    check_solver(model)
    counts = loop_counts(loops)
    votes = check_votes(model, votes)
    batch_size = check_batch_size(batch_size)
    if not hasattr(puzzles, "__len__") or len(puzzles) == 0:
        raise ArgumentError(f"predict_along got no puzzles ({type(puzzles).__name__} of length "
                            f"{len(puzzles) if hasattr(puzzles, '__len__') else '?'}) — pass an [N, 81] tensor or "
                            "a list of 81-character strings, N >= 1")
    kwargs = {"votes": votes} if votes != 1 else {}
    along = callable(getattr(model, "solve_along", None))
    parts = {count: [] for count in counts}
    with progress_bar(len(puzzles), desc, unit="puzzle", enabled=False if progress is False else None) as bar:
        for start in range(0, len(puzzles), batch_size):
            chunk = puzzles[start : start + batch_size]
            if along:
                predictions = model.solve_along(chunk, loops=counts, batch_size=batch_size, **kwargs)
            else:
                predictions = {count: model.solve(chunk, loops=count, batch_size=batch_size, **kwargs) for count in counts}
            for count in counts:
                parts[count].append(predictions[count])
            bar.update(len(chunk))
    return {count: torch.cat(chunks) if chunks else puzzles.clone() for count, chunks in parts.items()}


def evaluate_sudoku(model, puzzles, solutions, loops=(16, 32, 64, 128), votes: int = 1, batch_size: int = 500, *,
                    progress: bool | None = False, desc: str = "sudoku eval", predictions: dict | None = None) -> dict:
    """Board and cell accuracy per loop count: ``{T: {"board_accuracy", "cell_accuracy", "seconds",
    "puzzles_per_second"}}``.

    Every ``T`` is read out along one trajectory per puzzle (`predict_along`), so ``seconds`` is the time of the
    whole run (the same for every ``T``) and ``puzzles_per_second`` its throughput at ``max(loops)``. Pass
    ``predictions`` (from `predict_along`) to score grids already computed.
    """
    from ..data.sudoku import board_accuracy, cell_accuracy

    from ._eval_checks import check_predictions, check_solver

    check_solver(model)
    if predictions is not None:
        check_predictions(predictions, len(puzzles))
    model.eval()
    threads = torch.get_num_threads()
    if "OMP_NUM_THREADS" not in os.environ:  # a run pinned to fewer threads (parallel jobs) keeps its pin
        torch.set_num_threads(os.cpu_count() or 1)
    try:
        started = time.perf_counter()
        if predictions is None:
            predictions = predict_along(model, puzzles, loops, votes, batch_size, progress=progress, desc=desc)
        seconds = time.perf_counter() - started
    finally:  # the caller's thread setting is the caller's: restored, never left changed
        torch.set_num_threads(threads)
    return {count: {"board_accuracy": board_accuracy(grid, puzzles, solutions),
                    "cell_accuracy": cell_accuracy(grid, puzzles, solutions),
                    "seconds": seconds, "puzzles_per_second": len(puzzles) / max(seconds, 1e-9)}
            for count, grid in sorted(predictions.items())}


def puzzle_records(puzzles, solutions, predictions: dict) -> list[dict]:
    """One dict per puzzle, to join accuracy with diagnostics: ``{"index", "givens", "rounds_naked",
    "rounds_singles", "solved_at"}``.

    ``rounds_naked`` / ``rounds_singles`` are `jacobiscope.data.sudoku.propagation_rounds` without and with hidden
    singles (None: that propagation gets stuck); ``solved_at`` lists the loop counts of ``predictions`` at which the
    whole board is right.
    """
    from ..data.sudoku import board_correct, propagation_rounds, to_strings

    correct = {count: board_correct(grid, puzzles, solutions).tolist() for count, grid in sorted(predictions.items())}
    records = []
    for index, puzzle in enumerate(to_strings(puzzles)):
        records.append({"index": index, "givens": 81 - puzzle.count("0"),
                        "rounds_naked": propagation_rounds(puzzle),
                        "rounds_singles": propagation_rounds(puzzle, hidden_singles=True),
                        "solved_at": [count for count, flags in correct.items() if flags[index]]})
    return records
