"""Random puzzles with unique solutions, and the base-grid key of the leakage check."""
from __future__ import annotations

import random

import torch

from ._board import (
    MIN_UNIQUE_GIVENS, SudokuError, _BOX, _COL, _DIGITS_IN, _FULL, _ROW, _as_rng, _is_int, _parse, _setup, _to_string
)
from ._solver import _search, _solutions
from ._tensors import to_strings, to_tensor


def grid_key(grid) -> str:
    """A key of a full grid that is the same for every relabelling of its digits and for its transpose.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> grid = "678312945153649782942875136265731894394286571781594623529468317417953268836127459"
        >>> relabelled = grid.translate(str.maketrans("123456789", "912345678"))
        >>> transposed = "".join(grid[c * 9 + r] for r in range(9) for c in range(9))
        >>> sudoku.grid_key(grid) == sudoku.grid_key(relabelled) == sudoku.grid_key(transposed)
        True

    Two puzzles whose solutions share a key come from the same base grid up to those symmetries, which is how a
    test puzzle leaks into training data built from it (`shared_grids`). Band, stack, row and column permutations
    are not folded in: that canonical form needs a search over 3,359,232 grid symmetries per grid.
    """
    cells = _parse(grid, "grid")
    _setup(cells, "grid")  # a clash raises: the key of a broken grid would match unrelated grids
    if 0 in cells:
        raise SudokuError(f"grid_key needs a complete grid, but {_to_string(cells)[:20]!r}... has "
                          f"{cells.count(0)} blanks. Pass solutions (full grids), not puzzles.")
    candidates = []
    for order in (cells, [cells[c * 9 + r] for r in range(9) for c in range(9)]):
        names: dict[int, str] = {}
        candidates.append("".join(names.setdefault(v, str(len(names) + 1)) if v else "0" for v in order))
    return min(candidates)


def shared_grids(grids, others) -> list[int]:
    """Indices of ``grids`` whose `grid_key` also occurs among ``others``: the leakage check between a training set
    and a test set (pass their solutions).

    Example::

        >>> from jacobiscope.data import sudoku
        >>> _, (a, b) = sudoku.generate_many(2, givens=40, seed=0)
        >>> sudoku.shared_grids([a, b], [b.translate(str.maketrans("12", "21"))])
        [1]
    """
    def listed(boards, name):
        if isinstance(boards, torch.Tensor):
            return to_strings(boards)
        if isinstance(boards, str):  # one grid, not 81 one-character grids
            return [boards]
        if isinstance(boards, (bytes, bytearray)) or not hasattr(boards, "__iter__"):
            raise SudokuError(f"{name} must be grids (a list of 81-digit strings or an [N, 81] tensor), got "
                              f"{type(boards).__name__}.")
        return list(boards)

    keys = {grid_key(grid) for grid in listed(others, "others")}
    grids = listed(grids, "grids")
    return [index for index, grid in enumerate(grids) if grid_key(grid) in keys]


def _has_other_solution(cells: list[int], i: int, digit: int) -> bool:
    """Whether the board, with cell ``i`` blanked, has a solution where cell ``i`` is not ``digit``.

    The board with ``i`` filled in is known to be unique, so this is exactly "blanking ``i`` breaks
    uniqueness"; trying only the other digits at ``i`` is cheaper than counting solutions to two.
    """
    rows, cols, boxes = _setup(cells)
    r, c, b = _ROW[i], _COL[i], _BOX[i]
    free = _FULL & ~(rows[r] | cols[c] | boxes[b]) & ~(1 << (digit - 1))
    for d in _DIGITS_IN[free]:
        bit = 1 << (d - 1)
        cells[i] = d
        rows[r] |= bit
        cols[c] |= bit
        boxes[b] |= bit
        found: list[list[int]] = []
        _search(cells, rows, cols, boxes, 1, found, None)
        cells[i] = 0
        rows[r] ^= bit
        cols[c] ^= bit
        boxes[b] ^= bit
        if found:
            return True
    return False


def _dig(solution: list[int], givens: int, rng: random.Random, unique: bool) -> list[int] | None:
    """Blank cells of ``solution`` in random order, keeping each blank only if the puzzle stays unique."""
    cells = list(solution)
    remaining = 81
    for i in rng.sample(range(81), 81):
        if remaining == givens:
            return cells
        digit = cells[i]
        cells[i] = 0
        if unique and _has_other_solution(cells, i, digit):
            cells[i] = digit
        else:
            remaining -= 1
    return cells if remaining == givens else None


def _check_unique(unique) -> None:
    if not isinstance(unique, bool):
        raise SudokuError(f"unique must be True or False, got {unique!r} ({type(unique).__name__}).")


def _check_givens(givens, unique: bool) -> None:
    low = MIN_UNIQUE_GIVENS if unique else 0
    if isinstance(givens, bool) or not isinstance(givens, int) or not low <= givens <= 81:
        raise SudokuError(
            f"givens must be an int in [{low}, 81]{' for unique puzzles' if unique else ''}, got {givens!r}. "
            + ("No Sudoku with fewer than 17 givens has a unique solution; random digging reaches about 22 givens "
               "reliably (lower counts need many attempts)." if unique else "Pass a number of givens from 0 to 81.")
        )


def generate(givens: int = 30, seed=None, unique: bool = True, *, max_attempts: int = 200) -> tuple[str, str]:
    """A random Sudoku with exactly ``givens`` givens; returns ``(puzzle, solution)`` strings.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> puzzle, solution = sudoku.generate(givens=30, seed=0)
        >>> 81 - puzzle.count("0"), sudoku.count_solutions(puzzle), sudoku.solve(puzzle) == solution
        (30, 1, True)

    Arguments:
        givens: number of given cells, 17-81 with ``unique=True`` (0-81 otherwise).
        seed: int seed, None (fresh randomness), or a `random.Random` / `torch.Generator` to draw from.
        unique: keep only blanks that leave the solution unique (so every returned puzzle has exactly one
            solution). With False, blanks are drawn uniformly: the puzzle still has ``solution`` as a
            solution, but may have others.
        max_attempts: fresh solution grids to try before giving up. Digging one grid ends at a minimal
            puzzle, usually 22-27 givens, so very low counts need several grids.

    Returns:
        ``(puzzle, solution)``: 81-character strings, '0' for blanks; every given equals the solution's digit.

    The full grid comes from the solver run on an empty board with random digit order; cells are then
    blanked in random order, each one kept blank only when no other digit fits there in any solution.
    """
    _check_unique(unique)
    _check_givens(givens, unique)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise SudokuError(f"max_attempts must be a positive int (fresh grids to try), got {max_attempts!r}. "
                          "Pass e.g. max_attempts=200.")
    rng = _as_rng(seed)
    for _ in range(max_attempts):
        solution = _solutions([0] * 81, 1, rng)[0]
        puzzle = _dig(solution, givens, rng, unique)
        if puzzle is not None:
            return _to_string(puzzle), _to_string(solution)
    raise SudokuError(
        f"no unique puzzle with {givens} givens found in {max_attempts} attempts: random digging rarely "
        "gets below about 22 givens. Ask for more givens or raise max_attempts."
    )


def relabelled_rows(n: int, seed: int = 0, blank_fraction: float = 0.5) -> list[dict]:
    """Quick valid training rows without running the solver per puzzle: one generated grid, its digits relabelled
    at random and cells blanked at random (for smoke runs, tests and timing; not a benchmark).

    Example::

        >>> from jacobiscope.data import sudoku
        >>> rows = sudoku.relabelled_rows(2)
        >>> sorted(rows[0]), tuple(rows[0]["labels"].shape)
        (['input_ids', 'labels'], (81,))

    Arguments:
        n: number of rows, a positive int.
        seed: an int seed.
        blank_fraction: probability that a cell is blanked, in [0, 1].

    Returns:
        ``n`` dicts with ``input_ids`` (``[81]``, 0 = blank) and ``labels`` (``[81]``, the solution), as
        `transformers.Trainer` takes them.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SudokuError(f"n must be a positive int (the number of rows), got {n!r}.")
    if not _is_int(seed):
        raise SudokuError(f"seed must be an int, got {seed!r} ({type(seed).__name__}). Pass e.g. seed=0.")
    if isinstance(blank_fraction, bool) or not isinstance(blank_fraction, (int, float)) or not (
            0.0 <= blank_fraction <= 1.0):
        raise SudokuError(f"blank_fraction must be a number in [0, 1] (the chance a cell is blanked), got "
                          f"{blank_fraction!r}. Pass e.g. blank_fraction=0.5.")
    _, solution = generate(givens=30, seed=seed)
    grid = to_tensor([solution])[0]
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        relabelled = (torch.randperm(9, generator=generator) + 1)[grid - 1]
        blank = torch.rand(81, generator=generator) < blank_fraction
        rows.append({"input_ids": torch.where(blank, torch.zeros_like(relabelled), relabelled), "labels": relabelled})
    return rows


def generate_many(n: int, givens=30, seed=None, unique: bool = True) -> tuple[list[str], list[str]]:
    """``n`` random puzzles from `generate`; returns ``(puzzles, solutions)`` lists of strings.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> puzzles, solutions = sudoku.generate_many(3, givens=(28, 32), seed=1)
        >>> [28 <= 81 - p.count("0") <= 32 for p in puzzles]
        [True, True, True]

    Arguments:
        n: number of puzzles, a positive int.
        givens: an int, or an inclusive range ``(low, high)`` from which each puzzle's count is drawn
            uniformly (RRN draws uniformly from 17-34).
        seed: as for `generate`; one seed makes the whole list reproducible.
        unique: as for `generate`.

    Returns:
        ``(puzzles, solutions)``, each a list of ``n`` strings; pass them to `to_dataset` for a Dataset.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SudokuError(f"n must be a positive int (the number of puzzles), got {n!r}.")
    _check_unique(unique)
    if isinstance(givens, (tuple, list)):
        if len(givens) != 2:
            raise SudokuError(f"givens as a range must be (low, high), got {givens!r}.")
        low, high = givens
        for value in (low, high):
            _check_givens(value, unique)
        if low > high:
            raise SudokuError(f"givens range must have low <= high, got {givens!r}.")
    else:
        _check_givens(givens, unique)
        low = high = givens
    rng = _as_rng(seed)
    puzzles, solutions = [], []
    for _ in range(n):
        puzzle, solution = generate(rng.randint(low, high), rng, unique)
        puzzles.append(puzzle)
        solutions.append(solution)
    return puzzles, solutions
