"""The arguments of `predict_along` / `evaluate_sudoku`, checked before a single loop runs.

Example::

    >>> from jacobiscope.recipes._eval_checks import loop_counts
    >>> loop_counts((32, 16, 32))
    [16, 32]
    >>> loop_counts("16")
    Traceback (most recent call last):
    ...
    jacobiscope.errors.ArgumentError: loops must be a positive int or a list of them, got '16' (str) — pass e.g. loops=(16, 32) or loops=16.

Why a module of its own: the evaluation reads every loop count along one trajectory, so a count that is silently
truncated (``2.7 -> 2``), split (``"16" -> 1, 6``) or read as 1 (``True``) gives a table of numbers for loop counts
nobody asked for.
"""
from __future__ import annotations

import inspect
import math

import torch

from .._validation import _is_int, as_int
from ..errors import ArgumentError

__all__ = ["loop_counts", "check_solver", "check_votes", "check_batch_size", "check_predictions", "MAX_LOOPS"]

# The reference models' own limit on one run (beyond it a run takes hours on a CPU).
MAX_LOOPS = 100_000


def _count(value) -> int | None:
    """``value`` as a plain int when it is a whole number (numpy / 0-d torch integers too), else None; never a
    bool or a float, however whole (the shared `jacobiscope._validation` rule)."""
    return as_int(value) if _is_int(value) else None


def loop_counts(loops, name: str = "loops") -> list[int]:
    """The sorted, distinct loop counts of ``loops`` (one int or an iterable of ints, each 1..MAX_LOOPS)."""
    fix = f"pass e.g. {name}=(16, 32) or {name}=16"
    if isinstance(loops, (str, bytes)) or loops is None or isinstance(loops, (bool, float, dict, set)):
        raise ArgumentError(f"{name} must be a positive int or a list of them, got {loops!r} "
                            f"({type(loops).__name__}) — {fix}.")
    values = [loops] if _count(loops) is not None else None
    if values is None:
        try:
            values = list(loops)
        except TypeError:
            raise ArgumentError(f"{name} must be a positive int or a list of them, got {loops!r} "
                                f"({type(loops).__name__}) — {fix}.") from None
    if not values:
        raise ArgumentError(f"{name} is empty: no loop count to evaluate — {fix}.")
    counts = []
    for value in values:
        count = _count(value)
        if count is None:
            shown = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)
            raise ArgumentError(f"{name} must hold whole loop counts, got {shown} ({type(value).__name__}) — {fix}; "
                                "a fraction or a bool is never rounded to a loop count.")
        if count < 1:
            raise ArgumentError(f"{name} must be >= 1, got {count} — {fix}.")
        if count > MAX_LOOPS:
            raise ArgumentError(f"{name}={count} is more than the {MAX_LOOPS:,} loops allowed per run (it would run "
                                f"for hours) — pass a smaller count, e.g. {name}=(16, 32).")
        counts.append(count)
    return sorted(set(counts))


def check_solver(model) -> None:
    """``model`` must be a Sudoku solver: a ``solve`` method (and optionally ``solve_along``)."""
    if not callable(getattr(model, "solve", None)):
        raise ArgumentError(f"model is a {type(model).__name__}, not a Sudoku solver (it has no solve method) — pass "
                            "jacobiscope.load_pretrained('itrsa-sudoku') / 'akorn-sudoku' or a folder trained with "
                            "'jacobiscope sudoku train'.")


def check_votes(model, votes) -> int:
    """A positive int; above 1 only for a model whose solving method takes ``votes`` (AKOrN's energy voting)."""
    if _count(votes) is None or votes < 1:
        raise ArgumentError(f"votes must be a positive int, got {votes!r} — pass votes=1 (or e.g. 16 for AKOrN's "
                            "energy voting).")
    votes = int(votes)
    method = model.solve_along if callable(getattr(model, "solve_along", None)) else model.solve
    try:
        takes_votes = "votes" in inspect.signature(method).parameters
    except (TypeError, ValueError):  # a builtin without a signature: let the model itself decide
        takes_votes = True
    if votes != 1 and not takes_votes:
        raise ArgumentError(f"{type(model).__name__} has no energy votes (it is deterministic), got votes={votes} — "
                            "use votes=1, or an AKOrN model for energy voting.")
    return votes


def check_batch_size(batch_size) -> int:
    if _count(batch_size) is None or batch_size < 1:
        raise ArgumentError(f"batch_size must be a positive int, got {batch_size!r} — pass e.g. batch_size=500.")
    return int(batch_size)


def check_predictions(predictions, boards: int) -> dict:
    """``{T: [N, 81] tensor}`` as `predict_along` returns it, for ``boards`` puzzles."""
    if not isinstance(predictions, dict) or not predictions:
        raise ArgumentError(f"predictions must be the non-empty dict {{T: [N, 81] tensor}} that predict_along "
                            f"returns, got {type(predictions).__name__} — pass predictions=predict_along(model, "
                            "puzzles, loops) or leave it out.")
    for count, grid in predictions.items():
        if _count(count) is None or not isinstance(grid, torch.Tensor) or grid.shape != (boards, 81):
            shape = tuple(grid.shape) if isinstance(grid, torch.Tensor) else type(grid).__name__
            raise ArgumentError(f"predictions[{count!r}] must be an [{boards}, 81] tensor (one grid per puzzle) keyed "
                                f"by its loop count, got {shape} — pass what predict_along(model, puzzles, loops) "
                                "returns for these puzzles.")
    return predictions
