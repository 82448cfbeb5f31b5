"""Train and evaluate the reference Sudoku solvers with `transformers.Trainer` (the benchmark protocol of AKOrN and
of Tomihari & Karakida: train on SATNet rows 0-8999, test in-distribution on rows 9000-9999 and out-of-distribution on
the RRN test set)."""
from __future__ import annotations

import copy
import functools
import json
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from transformers import Trainer, TrainingArguments

from .._io import atomic_write_text
from ._sudoku_callbacks import (
    DivergenceCallback, EMACallback, RandomStreamsCallback, TimeBudgetCallback, _AccuracyCallback,
    _declare_checkpoint_format, _latest_checkpoint,
)

__all__ = ["SudokuRecipe", "train_sudoku", "evaluate_sudoku", "predict_along", "puzzle_records", "EMACallback",
           "build_model", "LoopCountCollator", "validation_puzzles", "general_training_puzzles", "TimeBudgetCallback"]


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

    def training_loops(self) -> tuple[int, int]:
        """The inclusive range of loop counts drawn for a training batch."""
        low = self.loops if self.loops_min is None else self.loops_min
        high = self.loops if self.loops_max is None else self.loops_max
        if not 1 <= low <= high:
            raise ValueError(f"loops_min/loops_max must satisfy 1 <= loops_min <= loops_max, got {low}, {high}.")
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
        raise ValueError(f"arch must be 'itrsa' or 'akorn', got {self.arch!r}.")

    @classmethod
    def from_json(cls, path) -> "SudokuRecipe":
        data = json.loads(Path(path).read_text())
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"Unknown recipe keys {sorted(unknown)} in {path}; known: {sorted(known)}.")
        return cls(**data)


def build_model(recipe: SudokuRecipe):
    from ..models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

    if recipe.init_from is not None:
        from ..hub import load_pretrained

        model = load_pretrained(recipe.init_from)
        expected = ItrSAForSudoku if recipe.arch == "itrsa" else AKOrNForSudoku
        if not isinstance(model, expected):
            raise ValueError(f"init_from={recipe.init_from!r} holds a {type(model).__name__}, but the recipe's arch is "
                             f"{recipe.arch!r}; set arch to match the weights.")
        mismatched = {k: (getattr(model.config, k), v) for k, v in recipe.model_config().items()
                      if k != "loops" and getattr(model.config, k, v) != v}
        if mismatched:
            raise ValueError(f"init_from={recipe.init_from!r} differs from the recipe in {mismatched} "
                             "(checkpoint, recipe); make the recipe describe the checkpoint's architecture.")
        model.config.loops = recipe.loops
        return model.train()
    if recipe.arch == "itrsa":
        return ItrSAForSudoku(ItrSAConfig(**recipe.model_config()))
    return AKOrNForSudoku(AKOrNConfig(**recipe.model_config()))


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
    """
    from .._locks import folder_lock

    with folder_lock(out_dir, "trained"):
        return _train_sudoku(recipe, Path(out_dir), resume=resume, data_path=data_path, progress=progress)


def _train_sudoku(recipe: SudokuRecipe, out_dir: Path, *, resume: bool, data_path, progress: bool) -> dict:
    from ..data import sudoku as data

    atomic_write_text(out_dir / "recipe.json", json.dumps(asdict(recipe), indent=1))
    torch.manual_seed(recipe.seed)
    train_set, _ = data.satnet_splits(data_path, limit=None)  # the test rows are never read here
    if recipe.train_limit is not None:
        train_set = train_set.select(range(min(recipe.train_limit, len(train_set))))
    if recipe.train_data == "general":
        from datasets import concatenate_datasets

        train_set = concatenate_datasets([general_training_puzzles(recipe, out_dir, progress=progress), train_set])
    elif recipe.train_data != "satnet":
        raise ValueError(f"train_data must be 'satnet' or 'general', got {recipe.train_data!r}.")
    if recipe.augment:
        train_set = data.augmented_dataset(train_set, seed=recipe.seed)
    else:
        train_set = train_set.with_format("torch", columns=["input_ids", "labels"])
    low, high = recipe.training_loops()
    validation = validation_puzzles(recipe)

    model = build_model(recipe)
    ema = EMACallback(recipe.ema_beta, recipe.ema_every, recipe.ema_start) if recipe.ema_beta > 0 else None
    accuracy = _AccuracyCallback(*validation, ema, out_dir, recipe.validation_loops or [recipe.loops])
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
    checkpoint = _latest_checkpoint(out_dir, needs_average=ema is not None) if resume else None
    diverged = out_dir / DivergenceCallback.FILE
    if resume and diverged.is_file() and (out_dir / "train_summary.json").is_file():
        # Resuming would start from weights whose next step overflows again: report the run as it ended.
        return dict(json.loads((out_dir / "train_summary.json").read_text()), already_finished=True)
    diverged.unlink(missing_ok=True)
    finished = _finished_summary(out_dir, checkpoint, recipe)
    if finished is not None:
        return finished
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
    callbacks = [c for c in (divergence, ema, random_streams, budget, accuracy) if c is not None]
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

    counts = sorted({int(count) for count in loops})
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

    model.eval()
    if "OMP_NUM_THREADS" not in os.environ:  # a run pinned to fewer threads (parallel jobs) keeps its pin
        torch.set_num_threads(os.cpu_count() or 1)
    started = time.perf_counter()
    if predictions is None:
        predictions = predict_along(model, puzzles, loops, votes, batch_size, progress=progress, desc=desc)
    seconds = time.perf_counter() - started
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
