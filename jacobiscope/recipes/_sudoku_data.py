"""The data of Sudoku training: the generated "general" training puzzles, the validation puzzles that choose the
checkpoint (never test puzzles), and the collator that draws each batch's loop count.

Example::

    >>> from jacobiscope.recipes.sudoku import SudokuRecipe, validation_puzzles
    >>> puzzles, solutions = validation_puzzles(SudokuRecipe(eval_limit=3, validation_givens=(40, 40)))
    >>> puzzles.shape, [int((row > 0).sum()) for row in puzzles], bool((solutions > 0).all())
    (torch.Size([3, 81]), [40, 40, 40], True)
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from .._io import atomic_write_text
from ._sudoku_recipe import SudokuRecipe

__all__ = ["GENERAL_PART_ROWS", "general_training_puzzles", "LoopCountCollator", "validation_puzzles"]


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
