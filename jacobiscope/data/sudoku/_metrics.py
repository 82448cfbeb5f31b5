"""Validity checks and board / cell accuracy."""
from __future__ import annotations


import torch

from ._board import SudokuError, _FULL, _UNIT_INDEX, _cell, _parse, _setup, _to_string
from ._tensors import _is_int_board, to_tensor


def validate_puzzle(puzzle) -> str:
    """Check a puzzle's format and that no two givens clash; return it as 81 digits with '0' for blanks.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> sudoku.validate_puzzle("5" + "." * 80)[:3]
        '500'
        >>> sudoku.validate_puzzle("55" + "0" * 79)
        Traceback (most recent call last):
        ...
        jacobiscope.errors.SudokuError: puzzle is contradictory: digit 5 appears twice in row 1 ...

    Arguments:
        puzzle: a string, list or int tensor of 81 digits.

    Returns:
        The canonical string. It does not search for a solution: use `count_solutions` for that.
    """
    cells = _parse(puzzle)
    _setup(cells)
    return _to_string(cells)


def _unit_ok(grid: torch.Tensor) -> torch.Tensor:
    """``[N]`` bool: every row, column and box of a full ``[N, 81]`` grid holds 1-9 once."""
    bits = torch.where(grid > 0, torch.ones_like(grid) << (grid - 1).clamp(min=0), torch.zeros_like(grid))
    units = bits[:, _UNIT_INDEX]  # [N, 27, 9]
    # Nine single bits sum to 0x1FF (nine one-bits) only if they are distinct: a sum of k powers of two has
    # k one-bits only when no two are equal (equal ones carry).
    return (units.sum(-1) == _FULL).all(-1) & (grid > 0).all(-1)


def is_valid_solution(grid):
    """Whether a completed grid obeys the Sudoku rules (no blanks, 1-9 once per row, column and box).

    Example::

        >>> from jacobiscope.data import sudoku
        >>> good = "678312945153649782942875136265731894394286571781594623529468317417953268836127459"
        >>> sudoku.is_valid_solution(good), sudoku.is_valid_solution("0" + good[1:])
        (True, False)
        >>> sudoku.is_valid_solution([good, good[::-1]]).tolist()
        [True, True]

    Arguments:
        grid: one board (string / ``[81]`` / ``[9, 9]`` tensor) or a batch (list of strings, ``[N, 81]``).

    Returns:
        A bool for one board, a ``[N]`` bool tensor for a batch.
    """
    single = isinstance(grid, str) or _is_int_board(grid) or (
        isinstance(grid, torch.Tensor) and not grid.is_floating_point() and grid.dtype != torch.bool
        and tuple(grid.shape) in ((81,), (9, 9)))
    ok = _unit_ok(to_tensor(grid))
    return bool(ok[0]) if single else ok


def _batches(pred, puzzles, solutions):
    pred, puzzles, solutions = to_tensor(pred), to_tensor(puzzles), to_tensor(solutions)
    if not pred.shape == puzzles.shape == solutions.shape:
        raise SudokuError(
            f"pred, puzzles and solutions must hold the same number of boards, got {pred.shape[0]}, "
            f"{puzzles.shape[0]} and {solutions.shape[0]}."
        )
    blank = (solutions == 0).any(-1)
    if bool(blank.any()):
        n = int(blank.nonzero()[0, 0])
        raise SudokuError(f"solutions must be complete grids, but solution {n} has blanks (0s). Pass the solved "
                          "grids as solutions (are puzzles and solutions swapped?).")
    puzzles = puzzles.to(solutions.device)
    clash = ((puzzles != 0) & (puzzles != solutions)).any(-1)
    if bool(clash.any()):
        n = int(clash.nonzero()[0, 0])
        i = int(((puzzles[n] != 0) & (puzzles[n] != solutions[n])).nonzero()[0, 0])
        raise SudokuError(f"puzzle {n}'s given {int(puzzles[n, i])} at {_cell(i)} disagrees with "
                          f"solution {n}'s {int(solutions[n, i])}. Pass puzzles and solutions in the same order.")
    return pred.to(solutions.device), puzzles, solutions


def board_correct(pred, puzzles, solutions) -> torch.Tensor:
    """Per board: is every blank cell of the puzzle predicted right? Givens are ignored.

    Example::

        >>> import torch
        >>> from jacobiscope.data import sudoku
        >>> solutions = sudoku.to_tensor(sudoku.generate_many(2, givens=40, seed=0)[1])
        >>> puzzles = solutions.clone()
        >>> puzzles[:, :10] = 0                       # cells 0-9 are the blanks that get scored
        >>> pred = solutions.clone()
        >>> pred[1, 3] = pred[1, 3] % 9 + 1            # one wrong blank fails board 1
        >>> sudoku.board_correct(pred, puzzles, solutions).tolist()
        [True, False]

    Arguments:
        pred: predicted boards: strings, ``[N, 81]`` ints, or one-hot/logits ``[N, 9, 9, 9]`` (argmax is taken).
        puzzles: the puzzles (0 = blank), which say which cells are scored.
        solutions: the true solutions: complete grids whose digits agree with the puzzles' givens (a
            `SudokuError` otherwise: blanks or disagreeing givens mean swapped or misaligned arguments).

    Returns:
        ``[N]`` bool tensor (`board_accuracy` is its mean).
    """
    pred, puzzles, solutions = _batches(pred, puzzles, solutions)
    return ((pred == solutions) | (puzzles != 0)).all(-1)


def board_accuracy(pred, puzzles, solutions) -> float:
    """The fraction of boards whose every blank is right (the AKOrN/SATNet board accuracy).

    Example::

        >>> from jacobiscope.data import sudoku
        >>> solution = "678312945153649782942875136265731894394286571781594623529468317417953268836127459"
        >>> puzzle = "0" * 40 + solution[40:]
        >>> wrong_blank = "9" + solution[1:]     # cell 0 is a blank: scored, and wrong
        >>> wrong_given = solution[:80] + "1"    # cell 80 is a given: not scored
        >>> sudoku.board_accuracy([solution, wrong_blank, wrong_given], [puzzle] * 3, [solution] * 3)
        0.6666666666666666

    Arguments:
        pred, puzzles, solutions: as for `board_correct` (strings, ``[N, 81]`` int tensors, or one-hot).

    Returns:
        A float in [0, 1] (NaN for zero boards). A board with no blanks counts as solved.
    """
    correct = board_correct(pred, puzzles, solutions)
    return float(correct.double().mean()) if correct.numel() else float("nan")


def cell_accuracy(pred, puzzles, solutions) -> float:
    """The fraction of blank cells predicted right, pooled over all boards (givens are ignored).

    Example::

        >>> from jacobiscope.data import sudoku
        >>> solution = "678312945153649782942875136265731894394286571781594623529468317417953268836127459"
        >>> puzzle = "0" * 4 + solution[4:]
        >>> sudoku.cell_accuracy("1" + solution[1:], puzzle, solution)
        0.75

    Arguments:
        pred, puzzles, solutions: as for `board_accuracy`.

    Returns:
        A float in [0, 1]; NaN when the puzzles have no blanks at all (nothing to score).
    """
    pred, puzzles, solutions = _batches(pred, puzzles, solutions)
    blank = puzzles == 0
    total = int(blank.sum())
    return float(((pred == solutions) & blank).sum()) / total if total else float("nan")
