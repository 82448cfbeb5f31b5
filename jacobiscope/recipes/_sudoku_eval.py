"""Evaluating a Sudoku solver: its grids along one trajectory per puzzle, the accuracy per loop count, and one record
per puzzle to join accuracy with diagnostics.

Example::

    >>> import torch
    >>> from jacobiscope.data import sudoku
    >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
    >>> from jacobiscope.recipes.sudoku import evaluate_sudoku
    >>> _ = torch.manual_seed(0)
    >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
    >>> puzzle = "670000005003040082040005136000730090304206070001090600509008000000950208000127400"
    >>> puzzles, solutions = sudoku.to_tensor([puzzle]), sudoku.to_tensor([sudoku.solve(puzzle)])
    >>> scores = evaluate_sudoku(model, puzzles, solutions, loops=(1, 2))
    >>> sorted(scores), sorted(scores[1])
    ([1, 2], ['board_accuracy', 'cell_accuracy', 'puzzles_per_second', 'seconds'])
"""
from __future__ import annotations

import os
import time

import torch

from ..errors import ArgumentError

__all__ = ["predict_along", "evaluate_sudoku", "puzzle_records"]


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
                parts[count].append(predictions[count].cpu())  # a model on a GPU: scored beside CPU solutions
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
