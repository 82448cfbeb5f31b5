"""Validity-preserving symmetry augmentation, fresh every epoch."""
from __future__ import annotations

import random

import torch

from ._board import SudokuError, _as_rng, _cell, _parse, _to_string
from ._tensors import to_strings


def _random_symmetry(rng: random.Random) -> tuple[list[int], list[int]]:
    """A validity-preserving relabelling: (cell permutation ``perm``, digit map ``dmap``).

    The new board is ``new[i] = dmap[old[perm[i]]]``. Permuting bands, stacks, rows within a band and
    columns within a stack, and transposing, all map rows/columns/boxes onto rows/columns/boxes.
    """
    rows = [3 * band + r for band in rng.sample(range(3), 3) for r in rng.sample(range(3), 3)]
    cols = [3 * stack + c for stack in rng.sample(range(3), 3) for c in rng.sample(range(3), 3)]
    perm = [rows[r] * 9 + cols[c] for r in range(9) for c in range(9)]
    if rng.random() < 0.5:
        perm = [perm[c * 9 + r] for r in range(9) for c in range(9)]
    return perm, [0] + rng.sample(range(1, 10), 9)


def augment(puzzle, solution, generator=None):
    """Apply one random Sudoku symmetry to a puzzle and its solution (the same transform to both).

    Example::

        >>> from jacobiscope.data import sudoku
        >>> puzzle, solution = sudoku.generate(givens=30, seed=0)
        >>> new_puzzle, new_solution = sudoku.augment(puzzle, solution, generator=7)
        >>> sudoku.is_valid_solution(new_solution), sudoku.solve(new_puzzle) == new_solution
        (True, True)

    Arguments:
        puzzle: one board (string, list or int tensor of 81 digits, 0 = blank).
        solution: its solution, same kind.
        generator: a `random.Random`, `torch.Generator`, numpy Generator, int seed, or None (fresh).

    Returns:
        ``(puzzle, solution)`` transformed: strings if strings came, else ``[81]`` int64 tensors. The
        transform is a random digit relabelling, band and stack permutations, row-within-band and
        column-within-stack permutations and (with probability 1/2) a transposition, so validity, the
        number of givens and uniqueness are preserved.
    """
    p, s = _parse(puzzle, "puzzle"), _parse(solution, "solution")
    clash = next((i for i in range(81) if p[i] and p[i] != s[i]), None)  # the solution holds every given
    if clash is not None:
        raise SudokuError(f"puzzle's given {p[clash]} at {_cell(clash)} disagrees with the solution's {s[clash]} "
                          "(0 = blank). Pass a puzzle and its own solution, in that order.")
    perm, dmap = _random_symmetry(_as_rng(generator))
    new_p = [dmap[p[j]] for j in perm]
    new_s = [dmap[s[j]] for j in perm]
    if isinstance(puzzle, str) and isinstance(solution, str):
        return _to_string(new_p), _to_string(new_s)
    return torch.tensor(new_p, dtype=torch.long), torch.tensor(new_s, dtype=torch.long)


def augmented_dataset(ds, seed=None):
    """A view of ``ds`` that re-augments every example each time it is read (`Dataset.with_transform`).

    Example::

        >>> from jacobiscope.data import sudoku
        >>> ds = sudoku.to_dataset(*sudoku.generate_many(2, givens=30, seed=0))
        >>> view = sudoku.augmented_dataset(ds, seed=0)
        >>> row = view[0]
        >>> row["input_ids"].shape, sudoku.is_valid_solution(row["labels"]), row["puzzle"] == ds[0]["puzzle"]
        (torch.Size([81]), True, False)

    Arguments:
        ds: a Dataset with ``input_ids`` and ``labels`` (and optionally ``puzzle`` / ``solution``, which are
            transformed too), e.g. from `satnet_splits`. It is not modified: a new view is returned.
        seed: seed of the augmentation stream; None for fresh randomness.

    Returns:
        The view. Reading it yields ``input_ids``/``labels`` as int64 tensors, so a `transformers.Trainer`
        (or any DataLoader) sees a fresh symmetry of each board at every epoch (``with_transform`` is
        ``set_transform`` on a copy, so ``ds`` keeps its format). The augmentation draws from a
        per-process stream; inside DataLoader workers it is reseeded from the worker's seed, so workers (which
        would otherwise inherit identical copies) do not repeat each other's transforms. A Trainer whose model
        takes ``input_ids`` and ``labels`` keeps the columns the transform needs (it drops the strings unless
        ``remove_unused_columns=False``).
    """
    if not hasattr(ds, "with_transform") or not hasattr(ds, "column_names"):
        raise SudokuError(f"augmented_dataset needs a datasets.Dataset, got {type(ds).__name__}. Build one with "
                          "sudoku.to_dataset(puzzles, solutions) or a sudoku loader.")
    missing = {"input_ids", "labels"} - set(ds.column_names)
    if missing:
        raise SudokuError(f"augmented_dataset needs the columns input_ids and labels, missing {sorted(missing)}; "
                          f"got {ds.column_names}. Build the dataset with to_dataset or a sudoku loader.")
    state = {"rng": _as_rng(seed), "worker_seed": None}

    def transform(batch):
        info = torch.utils.data.get_worker_info()
        if info is not None and state["worker_seed"] != info.seed:
            state["worker_seed"] = info.seed
            state["rng"] = random.Random(f"{seed}-{info.seed}")
        rng = state["rng"]
        puzzles = torch.as_tensor(batch["input_ids"], dtype=torch.long).reshape(-1, 81)
        solutions = torch.as_tensor(batch["labels"], dtype=torch.long).reshape(-1, 81)
        draws = [_random_symmetry(rng) for _ in range(puzzles.shape[0])]
        perm = torch.tensor([d[0] for d in draws], dtype=torch.long).reshape(-1, 81)
        dmap = torch.tensor([d[1] for d in draws], dtype=torch.long).reshape(-1, 10)
        new_puzzles = dmap.gather(1, puzzles.gather(1, perm))
        new_solutions = dmap.gather(1, solutions.gather(1, perm))
        out = dict(batch)
        out["input_ids"], out["labels"] = new_puzzles, new_solutions
        if "puzzle" in batch:
            out["puzzle"] = to_strings(new_puzzles)
        if "solution" in batch:
            out["solution"] = to_strings(new_solutions)
        return out

    view = ds.with_transform(transform)
    # The stream's state travels with the view, so a training run can checkpoint and restore it (exact resume).
    view.augmentation_stream = state
    return view
