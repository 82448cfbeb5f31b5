"""Sudoku for looped-transformer experiments: an exact solver, a generator, metrics, loaders and augmentation.

Example::

    >>> from jacobiscope.data import sudoku
    >>> puzzle = "670000005003040082040005136000730090304206070001090600509008000000950208000127400"
    >>> solution = sudoku.solve(puzzle)
    >>> solution[:18]
    '678312945153649782'
    >>> sudoku.count_solutions(puzzle), sudoku.is_valid_solution(solution)
    (1, True)
    >>> sudoku.to_tensor([puzzle]).shape, sudoku.to_one_hot([puzzle]).shape
    (torch.Size([1, 81]), torch.Size([1, 9, 9, 9]))

Conventions (those of SATNet, RRN and AKOrN): a board is 81 digits in row-major order, ``0`` (or ``.``) is a
blank, 1-9 are givens. Tensors are ``[N, 81]`` int64 with 0 for blanks, or one-hot ``[N, 9, 9, 9]`` (last axis
= digit) with an all-zero vector for a blank. Datasets have the columns ``puzzle`` and ``solution`` (strings),
``input_ids`` (81 ints, 0 = blank) and ``labels`` (81 ints, 1-9).

The benchmark protocol (AKOrN, after SATNet): train on SATNet rows 0-8999, test in distribution on rows
9000-9999 (`satnet_splits`), and out of distribution on the 18,000 RRN test puzzles (`rrn_test`). A board counts
as solved only if every blank is right (`board_accuracy`); givens are ignored.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import numbers
import os
import random
import re
from pathlib import Path

import torch

from ..errors import JacobiscopeError

__all__ = [
    "SudokuError",
    "UnsolvableSudokuError",
    "SudokuFileError",
    "SudokuDataNotFoundError",
    "ENV_VAR",
    "BUNDLED_DIR",
    "solve",
    "count_solutions",
    "propagation_rounds",
    "grid_key",
    "shared_grids",
    "generate",
    "generate_many",
    "relabelled_rows",
    "validate_puzzle",
    "is_valid_solution",
    "board_correct",
    "board_accuracy",
    "cell_accuracy",
    "to_tensor",
    "to_strings",
    "to_one_hot",
    "from_one_hot",
    "to_dataset",
    "load_csv",
    "load_satnet_tensors",
    "load_rrn_csv",
    "data_dir",
    "satnet_splits",
    "rrn_test",
    "augment",
    "augmented_dataset",
]

ENV_VAR = "JACOBISCOPE_SUDOKU_DATA"
SATNET_FILE = "satnet.csv.xz"
RRN_TEST_FILE = "rrn-test.csv.xz"
# The SATNet benchmark is defined by index: the first 9,000 boards train, the last 1,000 test (SATNet's
# exps/sudoku.py, testPct 0.1; AKOrN and IRED reuse it).
SATNET_ROWS = 10_000
SATNET_TRAIN_ROWS = 9_000
# Below 17 givens no 9x9 Sudoku has a unique solution (McGuire, Tugemann & Civario, 2012).
MIN_UNIQUE_GIVENS = 17


# ----------------------------------------------------------------------------------------------- errors
class SudokuError(JacobiscopeError, ValueError):
    """A Sudoku puzzle, grid, tensor or data file is unusable: malformed, contradictory or unsolvable."""


class UnsolvableSudokuError(SudokuError):
    """A well-formed puzzle whose givens do not clash directly still has no solution."""


class SudokuFileError(SudokuError):
    """A data file is malformed. ``path`` and ``line`` (1-based; ``None`` for tensor files) say where."""

    def __init__(self, message: str, path=None, line: int | None = None):
        super().__init__(message)
        self.path = path
        self.line = line


class SudokuDataNotFoundError(SudokuError, FileNotFoundError):
    """A Sudoku data file or folder does not exist (also a ``FileNotFoundError``)."""


# ------------------------------------------------------------------------------------- board geometry
_ROW = [i // 9 for i in range(81)]
_COL = [i % 9 for i in range(81)]
_BOX = [(i // 27) * 3 + (i % 9) // 3 for i in range(81)]
# Units 0-8 are rows, 9-17 columns, 18-26 boxes; the solver relies on this order to find a unit's mask.
_UNITS = (
    [[r * 9 + c for c in range(9)] for r in range(9)]
    + [[r * 9 + c for r in range(9)] for c in range(9)]
    + [[i for i in range(81) if _BOX[i] == b] for b in range(9)]
)
_UNIT_NAMES = ["row"] * 9 + ["column"] * 9 + ["box"] * 9
_FULL = 0x1FF  # bit d-1 set <=> digit d
_POPCOUNT = [bin(m).count("1") for m in range(512)]
_DIGIT_OF_BIT = {1 << d: d + 1 for d in range(9)}
_DIGITS_IN = [tuple(d + 1 for d in range(9) if m >> d & 1) for m in range(512)]
_UNIT_INDEX = torch.tensor(_UNITS, dtype=torch.long)  # [27, 9]
_BOARD = re.compile(r"[0-9.]{81}")  # [0-9], not \d: only ASCII digits
_SOLVED_BOARD = re.compile(r"[1-9]{81}")


def _is_int(value) -> bool:
    # numbers.Integral admits numpy integers; bool is an int subclass but never a digit.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _cell(i: int) -> str:
    return f"r{i // 9 + 1}c{i % 9 + 1}"


# ------------------------------------------------------------------------------------------- parsing
def _parse(board, name: str = "puzzle") -> list[int]:
    """One board (81-char string, sequence of 81 ints, or an int tensor with 81 elements) as a list of ints."""
    if isinstance(board, str):
        text = board.strip()
        if len(text) != 81:
            raise SudokuError(
                f"{name} must have 81 characters (9 rows of 9, row-major, '0' or '.' for blanks), got "
                f"{len(text)}: {text[:100]!r}. Pass the whole board as one string without separators."
            )
        match = re.search(r"[^0-9.]", text)
        if match:
            i = match.start()
            raise SudokuError(
                f"{name} may contain only the digits 0-9 and '.', got {match.group()!r} at position {i} "
                f"({_cell(i)}). Use '0' or '.' for blanks and 1-9 for givens."
            )
        return [0 if ch == "." else ord(ch) - 48 for ch in text]
    if isinstance(board, torch.Tensor):
        if board.is_floating_point() or board.is_complex() or board.dtype == torch.bool:
            raise SudokuError(
                f"{name} as a tensor must hold integer digits (0 = blank), got dtype {board.dtype}. "
                "Convert a one-hot or logit tensor with sudoku.from_one_hot first."
            )
        if board.numel() != 81:
            raise SudokuError(
                f"{name} as a tensor must have 81 elements ([81] or [9, 9]), got shape {tuple(board.shape)}. "
                "For a batch, pass one row at a time or use the batch functions (to_strings, board_accuracy)."
            )
        values = [int(v) for v in board.reshape(81).tolist()]
    elif isinstance(board, (list, tuple)):
        flat = [v for row in board for v in row] if len(board) == 9 and all(
            isinstance(row, (list, tuple)) for row in board) else list(board)
        if len(flat) != 81 or not all(_is_int(v) for v in flat):
            raise SudokuError(
                f"{name} as a sequence must be 81 ints (or 9 rows of 9), got {len(flat)} items. "
                "Pass the board as an 81-character string or a list of 81 ints, 0 = blank."
            )
        values = [int(v) for v in flat]
    else:
        raise SudokuError(
            f"{name} must be an 81-character string, a list of 81 ints or an int tensor of 81 elements, "
            f"got {type(board).__name__}."
        )
    for i, v in enumerate(values):
        if not 0 <= v <= 9:
            raise SudokuError(
                f"{name} digits must be 0-9 (0 = blank), got {v} at position {i} ({_cell(i)}). "
                "Use 0 for blanks and 1-9 for givens."
            )
    return values


def _setup(cells: list[int], name: str = "puzzle"):
    """Row/column/box masks of the givens; a `SudokuError` naming the clash if two givens share a unit."""
    rows, cols, boxes = [0] * 9, [0] * 9, [0] * 9
    for i, v in enumerate(cells):
        if not v:
            continue
        bit = 1 << (v - 1)
        r, c, b = _ROW[i], _COL[i], _BOX[i]
        if (rows[r] | cols[c] | boxes[b]) & bit:
            for k in (r, 9 + c, 18 + b):
                other = next((j for j in _UNITS[k] if j != i and cells[j] == v), None)
                if other is not None:
                    raise SudokuError(
                        f"{name} is contradictory: digit {v} appears twice in {_UNIT_NAMES[k]} "
                        f"{k % 9 + 1} (cells {_cell(other)} and {_cell(i)}). Check the givens; a Sudoku "
                        "needs each digit at most once per row, column and box."
                    )
        rows[r] |= bit
        cols[c] |= bit
        boxes[b] |= bit
    return rows, cols, boxes


def _to_string(cells) -> str:
    return "".join(map(str, cells))


# -------------------------------------------------------------------------------------------- solver
def _search(cells, rows, cols, boxes, limit, found, rng) -> None:
    """Depth-first search with propagation; appends completed boards to ``found`` until it holds ``limit``.

    Propagation places naked singles (a cell with one candidate) and hidden singles (a digit with one place
    in a unit) until neither applies, then branches on the cell with the fewest candidates (MRV). Every
    placement made in this frame is undone on return, so the caller's state is unchanged: the recursion
    shares one board instead of copying it at each branch.
    """
    placed = []
    try:
        while True:
            progress = False
            best, best_count = -1, 10
            cand = [0] * 81
            for i in range(81):
                if cells[i]:
                    continue
                r, c, b = _ROW[i], _COL[i], _BOX[i]
                m = _FULL & ~(rows[r] | cols[c] | boxes[b])
                if not m:
                    return
                if not m & (m - 1):
                    cells[i] = _DIGIT_OF_BIT[m]
                    rows[r] |= m
                    cols[c] |= m
                    boxes[b] |= m
                    placed.append(i)
                    progress = True
                else:
                    cand[i] = m
                    count = _POPCOUNT[m]
                    if count < best_count:
                        best, best_count = i, count
            if progress:
                continue
            if best < 0:
                found.append(cells.copy())
                return
            # Hidden singles. ``cand`` may go stale as this pass places digits, but stale sets only ever
            # contain the true ones, so a "no place for a digit" verdict is always right, and a hidden single
            # is re-checked against the live masks before it is placed.
            pair_unit, pair_bit = -1, 0
            for k in range(27):
                have = rows[k] if k < 9 else cols[k - 9] if k < 18 else boxes[k - 18]
                once = twice = thrice = 0
                unit = _UNITS[k]
                for i in unit:
                    m = cand[i]
                    thrice |= twice & m
                    twice |= once & m
                    once |= m
                if (once | have) != _FULL:
                    return
                singles = once & ~twice & ~have
                if pair_unit < 0 and twice & ~thrice:
                    pair_unit, pair_bit = k, twice & ~thrice & -(twice & ~thrice)
                while singles:
                    bit = singles & -singles
                    singles ^= bit
                    i = next((j for j in unit if cand[j] & bit), -1)
                    if i < 0:  # its only cell took another hidden single in this unit: no place left
                        return
                    r, c, b = _ROW[i], _COL[i], _BOX[i]
                    if (rows[r] | cols[c] | boxes[b]) & bit:
                        return
                    cells[i] = _DIGIT_OF_BIT[bit]
                    rows[r] |= bit
                    cols[c] |= bit
                    boxes[b] |= bit
                    cand[i] = 0
                    placed.append(i)
                    progress = True
            if progress:
                continue
            # Branch on the smallest choice: a cell's candidates, or, when no cell has two, the two places a
            # digit has left in some unit (as dancing links does). Without the second kind, boards with few
            # givens and several solutions can send fewest-candidate search into huge dead subtrees.
            if best_count > 2 and pair_unit >= 0:
                digit = _DIGIT_OF_BIT[pair_bit]
                choices = [(j, digit) for j in _UNITS[pair_unit] if cand[j] & pair_bit]
            else:
                choices = [(best, d) for d in _DIGITS_IN[cand[best]]]
            if rng is not None:
                rng.shuffle(choices)
            for i, d in choices:
                bit = 1 << (d - 1)
                r, c, b = _ROW[i], _COL[i], _BOX[i]
                cells[i] = d
                rows[r] |= bit
                cols[c] |= bit
                boxes[b] |= bit
                _search(cells, rows, cols, boxes, limit, found, rng)
                cells[i] = 0
                rows[r] ^= bit
                cols[c] ^= bit
                boxes[b] ^= bit
                if len(found) >= limit:
                    return
            return
    finally:
        for i in placed:
            bit = 1 << (cells[i] - 1)
            rows[_ROW[i]] ^= bit
            cols[_COL[i]] ^= bit
            boxes[_BOX[i]] ^= bit
            cells[i] = 0


def _solutions(cells: list[int], limit: int, rng=None, name: str = "puzzle") -> list[list[int]]:
    rows, cols, boxes = _setup(cells, name)
    found: list[list[int]] = []
    _search(list(cells), rows, cols, boxes, limit, found, rng)
    return found


def solve(puzzle, *, unique: bool = False) -> str:
    """Solve a Sudoku exactly; return the solution as an 81-digit string.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> sudoku.solve("..3.2.6..9..3.5..1..18.64....81.29..7.......8..67.82....26.95..8..2.3..9..5.1.3..")[:9]
        '483921657'

    Arguments:
        puzzle: 81 characters in row-major order, '0' or '.' for blanks (or a list / int tensor of 81 digits).
        unique: also prove there is no second solution, and raise if there is one (costs a second search).

    Returns:
        The solution string. With several solutions and ``unique=False``, the first one found (deterministic).

    Raises `SudokuError` for a malformed or contradictory puzzle, `UnsolvableSudokuError` when no solution
    exists. Bitmask constraint propagation (naked and hidden singles), then branching on the smallest choice
    (a cell's candidates or a digit's places in a unit), in pure Python: about 0.1 ms for a SATNet board and
    0.3 ms for an RRN one.
    """
    cells = _parse(puzzle)
    found = _solutions(cells, 2 if unique else 1)
    if not found:
        raise UnsolvableSudokuError(
            f"puzzle {_to_string(cells)!r} has no solution: its givens do not clash directly, but no way of "
            "filling the blanks satisfies every row, column and box. Check the givens."
        )
    if unique and len(found) > 1:
        raise SudokuError(
            f"puzzle {_to_string(cells)!r} has more than one solution (e.g. {_to_string(found[0])} and "
            f"{_to_string(found[1])}). Add givens, or call solve(..., unique=False) to take the first."
        )
    return _to_string(found[0])


def count_solutions(puzzle, limit: int = 2) -> int:
    """The number of solutions of ``puzzle``, counted up to ``limit`` (so ``limit=2`` checks uniqueness).

    Example::

        >>> from jacobiscope.data import sudoku
        >>> sudoku.count_solutions("0" * 81, limit=2)
        2

    Arguments:
        puzzle: as for `solve`.
        limit: stop counting here; the search ends as soon as it has found this many.

    Returns:
        ``min(number of solutions, limit)``: 0 for an unsolvable puzzle, 1 for a proper (unique) Sudoku.

    Raises `SudokuError` for a malformed puzzle or givens that clash directly (a malformed input is a bug in
    the caller, not a puzzle with zero solutions).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SudokuError(f"limit must be a positive int, got {limit!r}. Use limit=2 to test uniqueness.")
    return len(_solutions(_parse(puzzle), limit))


# ----------------------------------------------------------------------------------------- generator
def _singles(cells: list[int], hidden: bool) -> dict[int, int] | None:
    """One parallel round: every cell forced by a naked single (and, with ``hidden``, a hidden single) on the
    current board, as ``{cell: digit}``; None on a contradiction (a blank without candidates)."""
    rows, cols, boxes = [0] * 9, [0] * 9, [0] * 9
    for i, v in enumerate(cells):
        if v:
            bit = 1 << (v - 1)
            rows[_ROW[i]] |= bit
            cols[_COL[i]] |= bit
            boxes[_BOX[i]] |= bit
    candidates = {i: _FULL & ~(rows[_ROW[i]] | cols[_COL[i]] | boxes[_BOX[i]]) for i, v in enumerate(cells) if not v}
    forced = {}
    for i, mask in candidates.items():
        if not mask:
            return None
        if _POPCOUNT[mask] == 1:
            forced[i] = _DIGIT_OF_BIT[mask]
    if hidden:
        for unit in _UNITS:
            for digit in range(1, 10):
                places = [i for i in unit if i in candidates and candidates[i] >> (digit - 1) & 1]
                if len(places) == 1 and places[0] not in forced:
                    forced[places[0]] = digit
    return forced


def propagation_rounds(puzzle, *, hidden_singles: bool = False) -> int | None:
    """How many parallel rounds of single-candidate filling solve ``puzzle``; None if they get stuck.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> satnet_row_0 = "670000005003040082040005136000730090304206070001090600509008000000950208000127400"
        >>> sudoku.propagation_rounds(satnet_row_0), sudoku.propagation_rounds(satnet_row_0, hidden_singles=True)
        (5, 2)

    Arguments:
        puzzle: one board (string, list or tensor of 81 digits, 0 = blank).
        hidden_singles: also place a digit that fits in only one cell of a row, column or box (without it, only
            cells with a single candidate are filled: "naked singles").

    Returns:
        The number of rounds, each filling every forced cell of the board at once (the depth a parallel
        propagator, or a looped model that mimics one, needs), or None when no cell is forced before the board is
        full (the puzzle needs hidden singles, or search). A measure of difficulty: every SATNet puzzle needs only
        naked singles, in about four rounds.
    """
    cells = _parse(puzzle, "puzzle")
    _setup(cells)
    rounds = 0
    while 0 in cells:
        forced = _singles(cells, hidden_singles)
        if not forced:
            return None
        for i, digit in forced.items():
            cells[i] = digit
        rounds += 1
    return rounds


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
    keys = {grid_key(grid) for grid in (to_strings(others) if isinstance(others, torch.Tensor) else others)}
    grids = to_strings(grids) if isinstance(grids, torch.Tensor) else list(grids)
    return [index for index, grid in enumerate(grids) if grid_key(grid) in keys]


def _as_rng(generator) -> random.Random:
    """A `random.Random` from a seed, None, a Random, a torch.Generator or a numpy Generator."""
    if isinstance(generator, random.Random):
        return generator
    if generator is None or (isinstance(generator, int) and not isinstance(generator, bool)):
        return random.Random(generator)
    if isinstance(generator, torch.Generator):
        return random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
    if hasattr(generator, "integers"):  # numpy.random.Generator, without importing numpy here
        return random.Random(int(generator.integers(0, 2**62)))
    raise SudokuError(
        f"generator must be None, an int seed, random.Random, torch.Generator or numpy Generator, got "
        f"{type(generator).__name__}."
    )


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


def _check_givens(givens, unique: bool) -> None:
    low = MIN_UNIQUE_GIVENS if unique else 0
    if isinstance(givens, bool) or not isinstance(givens, int) or not low <= givens <= 81:
        raise SudokuError(
            f"givens must be an int in [{low}, 81]{' for unique puzzles' if unique else ''}, got {givens!r}. "
            + ("No Sudoku with fewer than 17 givens has a unique solution; " if unique else "")
            + "random digging reaches about 22 givens reliably (lower counts need many attempts)."
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
    _check_givens(givens, unique)
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

    Returns:
        ``n`` dicts with ``input_ids`` (``[81]``, 0 = blank) and ``labels`` (``[81]``, the solution), as
        `transformers.Trainer` takes them.
    """
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
        n: number of puzzles.
        givens: an int, or an inclusive range ``(low, high)`` from which each puzzle's count is drawn
            uniformly (RRN draws uniformly from 17-34).
        seed: as for `generate`; one seed makes the whole list reproducible.
        unique: as for `generate`.

    Returns:
        ``(puzzles, solutions)``, each a list of ``n`` strings; pass them to `to_dataset` for a Dataset.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise SudokuError(f"n must be a non-negative int, got {n!r}.")
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


# ----------------------------------------------------------------------------------- batch conversion
def from_one_hot(x: torch.Tensor) -> torch.Tensor:
    """Digits ``[N, 81]`` int64 from a one-hot (or logit) tensor whose last axis is the digit.

    Example::

        >>> import torch
        >>> from jacobiscope.data import sudoku
        >>> grid = sudoku.to_tensor(["1" + "0" * 80])
        >>> sudoku.from_one_hot(sudoku.to_one_hot(grid))[0, :3].tolist()
        [1, 0, 0]

    Arguments:
        x: ``[N, 9, 9, 9]``, ``[N, 81, 9]``, ``[N, 729]`` (SATNet's flattened bits) or one board
            (``[9, 9, 9]`` / ``[81, 9]``). One-hot or logits, any dtype.

    Returns:
        ``[N, 81]`` int64: ``argmax + 1`` per cell, and 0 where the digit vector is all zero (a blank in the
        SATNet/AKOrN one-hot encoding). For logits, every cell gets its argmax digit.
    """
    if not isinstance(x, torch.Tensor):
        raise SudokuError(f"from_one_hot expects a torch.Tensor, got {type(x).__name__}.")
    if x.ndim >= 1 and x.shape[-1] == 729:
        x = x.reshape(*x.shape[:-1], 81, 9)
    if x.numel() % 729 or x.shape[-1] != 9 or x.ndim < 2:
        raise SudokuError(
            f"from_one_hot expects [N, 9, 9, 9], [N, 81, 9] or [N, 729] (last axis = digit), got shape "
            f"{tuple(x.shape)}."
        )
    x = x.reshape(-1, 81, 9)
    digits = x.argmax(-1) + 1
    return torch.where((x != 0).any(-1), digits, torch.zeros_like(digits)).long()


def _is_int_board(boards) -> bool:
    """A plain list of 81 ints, or 9 lists of 9: one board, not a batch of boards."""
    if not isinstance(boards, (list, tuple)):
        return False
    if len(boards) == 81:
        return all(_is_int(v) for v in boards)
    return len(boards) == 9 and all(isinstance(row, (list, tuple)) and len(row) == 9
                                    and all(_is_int(v) for v in row) for row in boards)


def to_tensor(boards) -> torch.Tensor:
    """Boards as a ``[N, 81]`` int64 tensor, 0 for blanks.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> sudoku.to_tensor(["." * 80 + "9"])[0, -3:].tolist()
        [0, 0, 9]

    Arguments:
        boards: one 81-character string, a list of them, a list of 81 ints, an int tensor of digits ``[81]``,
            ``[9, 9]``, ``[N, 81]`` or ``[N, 9, 9]``, or a one-hot / logit tensor (via `from_one_hot`):
            any float or bool tensor, and int tensors shaped ``[N, 9, 9, 9]``, ``[N, 81, 9]`` or ``[N, 729]``.
            An int ``[9, 9, 9]`` is read as nine digit grids; pass one-hot boards as float to be safe.

    Returns:
        ``[N, 81]`` int64 (a single board gives ``N = 1``). Values are checked to be 0-9.
    """
    if isinstance(boards, str) or _is_int_board(boards):
        boards = [boards]
    if isinstance(boards, torch.Tensor):
        # Digit grids have at most 3 dims and never end in (81, 9) or 729, so these shapes are one-hot
        # whatever the dtype (SATNet's tensors may be stored as bytes).
        one_hot_shape = boards.ndim >= 4 or tuple(boards.shape[-2:]) == (81, 9) or (
            boards.ndim >= 1 and boards.shape[-1] == 729)
        if boards.is_floating_point() or boards.dtype == torch.bool or one_hot_shape:
            return from_one_hot(boards)
        if boards.is_complex() or boards.numel() % 81 or boards.ndim == 0 or (
                boards.ndim >= 2 and boards.shape[-2:] != (9, 9) and boards.shape[-1] != 81):
            raise SudokuError(
                f"an int board tensor must be [81], [9, 9], [N, 81] or [N, 9, 9], got shape "
                f"{tuple(boards.shape)} ({boards.dtype})."
            )
        out = boards.reshape(-1, 81).long()
        if out.numel() and (out.min() < 0 or out.max() > 9):
            raise SudokuError(
                f"board tensors hold digits 0-9 (0 = blank), got values in [{int(out.min())}, "
                f"{int(out.max())}]. A one-hot tensor must be float or bool (see from_one_hot)."
            )
        return out
    if isinstance(boards, (list, tuple)):
        if boards and all(isinstance(b, str) for b in boards):
            text = []
            for n, board in enumerate(boards):
                board = board.strip()
                if not _BOARD.fullmatch(board):
                    _parse(board, f"board {n}")  # raises the precise message
                text.append(board)
            data = bytearray("".join(text).replace(".", "0"), "ascii")
            return (torch.frombuffer(data, dtype=torch.uint8).long() - 48).reshape(len(text), 81)
        return torch.tensor([_parse(b, f"board {n}") for n, b in enumerate(boards)], dtype=torch.long
                            ).reshape(-1, 81)
    raise SudokuError(
        f"boards must be a string, a list of strings or a tensor, got {type(boards).__name__}."
    )


def to_strings(boards) -> list[str]:
    """Boards as a list of 81-digit strings ('0' = blank).

    Example::

        >>> import torch
        >>> from jacobiscope.data import sudoku
        >>> sudoku.to_strings(torch.zeros(2, 81, dtype=torch.long))[1][:5]
        '00000'

    Arguments:
        boards: anything `to_tensor` accepts.

    Returns:
        One string per board, also for a single board.
    """
    grid = to_tensor(boards)
    return [s.decode("ascii") for s in (grid + 48).to(torch.uint8).numpy().view("S81").reshape(-1)]


def to_one_hot(boards, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One-hot ``[N, 9, 9, 9]`` (row, column, digit), all zero at blanks: the SATNet/AKOrN encoding.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> x = sudoku.to_one_hot(["3" + "0" * 80])
        >>> x.shape, x[0, 0, 0].tolist(), float(x[0, 0, 1].sum())
        (torch.Size([1, 9, 9, 9]), [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.0)

    Arguments:
        boards: anything `to_tensor` accepts.
        dtype: dtype of the result.

    Returns:
        ``[N, 9, 9, 9]`` tensor.
    """
    grid = to_tensor(boards)
    hot = torch.nn.functional.one_hot(grid, 10)[..., 1:]  # column 0 (blank) dropped: blanks become all zero
    return hot.reshape(-1, 9, 9, 9).to(dtype)


# ------------------------------------------------------------------------------------ validity, metrics
def validate_puzzle(puzzle) -> str:
    """Check a puzzle's format and that no two givens clash; return it as 81 digits with '0' for blanks.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> sudoku.validate_puzzle("5" + "." * 80)[:3]
        '500'
        >>> sudoku.validate_puzzle("55" + "0" * 79)
        Traceback (most recent call last):
        ...
        jacobiscope.data.sudoku.SudokuError: puzzle is contradictory: digit 5 appears twice in row 1 ...

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
    return pred.to(solutions.device), puzzles.to(solutions.device), solutions


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
        solutions: the true solutions.

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


# -------------------------------------------------------------------------------------------- datasets
def _check_rows(puzzles: torch.Tensor, solutions: torch.Tensor, where) -> None:
    """Raise `SudokuFileError` at the first row whose solution is invalid or disagrees with its givens."""
    bad_solution = ~_unit_ok(solutions)
    bad_givens = ~((puzzles == 0) | (puzzles == solutions)).all(-1)
    bad = bad_solution | bad_givens
    if bool(bad.any()):
        n = int(bad.nonzero()[0, 0])
        if bad_solution[n]:
            problem = "the solution breaks the Sudoku rules (each of 1-9 once per row, column and box)"
        else:
            i = int(((puzzles[n] != 0) & (puzzles[n] != solutions[n])).nonzero()[0, 0])
            problem = (f"given {int(puzzles[n, i])} at {_cell(i)} disagrees with the solution's "
                       f"{int(solutions[n, i])}")
        path, line, text = where(n)
        raise SudokuFileError(f"{text}: {problem}. Fix or drop that row, or pass validate=False.", path, line)


def _make_dataset(puzzles: torch.Tensor, solutions: torch.Tensor):
    import datasets
    import pyarrow as pa

    # Built from Arrow arrays: ten times faster than from_dict on Python lists for the 18,000 RRN rows, and
    # fixed-size lists make with_format("torch") return [N, 81] tensors.
    def column(grid):
        return pa.FixedSizeListArray.from_arrays(pa.array(grid.reshape(-1).numpy()), 81)

    features = datasets.Features({
        "puzzle": datasets.Value("string"),
        "solution": datasets.Value("string"),
        "input_ids": datasets.List(datasets.Value("int64"), length=81),
        "labels": datasets.List(datasets.Value("int64"), length=81),
    })
    return datasets.Dataset.from_dict({
        "puzzle": pa.array(to_strings(puzzles), pa.string()),
        "solution": pa.array(to_strings(solutions), pa.string()),
        "input_ids": column(puzzles),
        "labels": column(solutions),
    }, features=features)


def to_dataset(puzzles, solutions, *, validate: bool = True):
    """A `datasets.Dataset` with columns ``puzzle``, ``solution``, ``input_ids`` and ``labels``.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> puzzles, solutions = sudoku.generate_many(2, givens=40, seed=0)
        >>> ds = sudoku.to_dataset(puzzles, solutions)
        >>> ds.column_names, len(ds[0]["input_ids"])
        (['puzzle', 'solution', 'input_ids', 'labels'], 81)

    Arguments:
        puzzles: anything `to_tensor` accepts (0 = blank).
        solutions: the matching full grids.
        validate: check that each solution is a valid grid and agrees with its puzzle's givens.

    Returns:
        The Dataset; ``ds.with_format("torch")`` gives ``[N, 81]`` int64 ``input_ids`` and ``labels``.
    """
    puzzles, solutions = to_tensor(puzzles), to_tensor(solutions)
    if puzzles.shape != solutions.shape:
        raise SudokuError(f"got {puzzles.shape[0]} puzzles but {solutions.shape[0]} solutions; pass one each.")
    if validate:
        _check_rows(puzzles, solutions, lambda n: (None, None, f"row {n}"))
    return _make_dataset(puzzles, solutions)


def _open_text(path: Path):
    opener = {".xz": lzma.open, ".lzma": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}.get(path.suffix, open)
    return opener(path, "rt", encoding="utf-8-sig", newline=None)


def _existing(path, what: str) -> Path:
    path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        raise SudokuDataNotFoundError(f"{what} {str(path)!r} does not exist — check the path.")
    return path


def _read_csv(path, header, limit):
    """Rows of a ``puzzle,solution`` text file: (puzzle strings, solution strings, 1-based line numbers)."""
    path = _existing(path, "Sudoku csv file")
    if path.is_dir():
        raise SudokuFileError(f"{str(path)!r} is a folder; load_csv needs a file (use load_rrn_csv for a folder).",
                              path)
    if header not in ("auto", True, False):
        raise SudokuError(f"header must be 'auto', True or False, got {header!r}.")
    puzzles, solutions, lines = [], [], []
    first = True
    try:
        with _open_text(path) as handle:
            for number, text in enumerate(handle, start=1):
                if limit is not None and len(puzzles) >= limit:
                    break
                text = text.strip()
                if not text:
                    continue  # blank lines (e.g. a trailing newline) carry no row
                fields = [f.strip().strip('"') for f in text.split(",")]
                is_first, first = first, False
                # "auto" skips only a line of words (no board field), so a typo in the first data row still
                # raises instead of silently dropping that row.
                if is_first and (header is True or (header == "auto" and re.search(r"[A-Za-z]", text)
                                                    and not any(_BOARD.fullmatch(f) for f in fields))):
                    continue
                if len(fields) != 2 or not _BOARD.fullmatch(fields[0]) or not _SOLVED_BOARD.fullmatch(fields[1]):
                    raise SudokuFileError(
                        f"{path}:{number}: expected 'puzzle,solution': two 81-digit strings, the puzzle with "
                        f"'0' or '.' for blanks and a complete solution of digits 1-9, got {text[:120]!r}. "
                        "Fix that line (a file of puzzles without solutions must be solved first).",
                        path, number,
                    )
                puzzles.append(fields[0])
                solutions.append(fields[1])
                lines.append(number)
    except (UnicodeDecodeError, lzma.LZMAError, OSError, EOFError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise SudokuFileError(
            f"{path}: cannot read it as text ({type(error).__name__}: {error}). Expected a plain, .xz, .gz or "
            ".bz2 csv file of 'puzzle,solution' lines.", path) from error
    return puzzles, solutions, lines


def _check_limit(limit):
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise SudokuError(f"limit must be None or a non-negative int (the number of rows to keep), got {limit!r}.")


def _load_rows(path, header, limit, validate):
    _check_limit(limit)
    path = Path(os.fspath(path)).expanduser()
    puzzle_text, solution_text, lines = _read_csv(path, header, limit)
    puzzles, solutions = to_tensor(puzzle_text), to_tensor(solution_text)
    if validate:
        _check_rows(puzzles, solutions, lambda n: (path, lines[n], f"{path}:{lines[n]}"))
    return puzzles, solutions


def load_csv(path, *, header="auto", limit: int | None = None, validate: bool = True):
    """Load a ``puzzle,solution`` csv file (plain, .xz, .gz or .bz2) into a `datasets.Dataset`.

    Example::

        >>> import pathlib, tempfile
        >>> from jacobiscope.data import sudoku
        >>> puzzle, solution = sudoku.generate(givens=40, seed=0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = pathlib.Path(folder) / "boards.csv"
        ...     _ = path.write_text(f"quizzes,solutions\\n{puzzle}, {solution}\\n\\n")
        ...     ds = sudoku.load_csv(path)
        >>> len(ds), ds[0]["puzzle"] == puzzle, ds[0]["labels"][:3] == [int(d) for d in solution[:3]]
        (1, True, True)

    Arguments:
        path: the file. Digits are read as strings, so leading zeros are never lost; fields may be separated
            by ``,`` or ``, ``; blank lines are skipped; '.' blanks become '0'.
        header: ``"auto"`` skips a first (non-blank) line that contains letters (e.g. ``quizzes,solutions``);
            True always skips it; False never does.
        limit: keep only the first ``limit`` rows (reading stops there).
        validate: check every solution is a valid grid that agrees with its puzzle's givens.

    Returns:
        Dataset with ``puzzle``, ``solution`` (strings), ``input_ids`` (0 = blank) and ``labels`` (81 ints).

    A malformed line raises `SudokuFileError` naming the file and line.
    """
    return _make_dataset(*_load_rows(path, header, limit, validate))


def _load_tensor(path: Path):
    path = _existing(path, "SATNet tensor file")
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types (UnpicklingError, RuntimeError, ...) for a bad file
        raise SudokuFileError(
            f"{path}: cannot load it with torch.load(weights_only=True) ({type(error).__name__}: {error}). "
            "Expected SATNet's features.pt / labels.pt, a tensor of one-hot boards [N, 9, 9, 9].", path) from error
    if not isinstance(value, torch.Tensor):
        raise SudokuFileError(f"{path}: expected a tensor of one-hot boards [N, 9, 9, 9], got "
                              f"{type(value).__name__}.", path)
    if value.ndim < 2 or value.shape[-1] not in (9, 729) or value.shape[1:].numel() != 729:
        raise SudokuFileError(f"{path}: expected one-hot boards [N, 9, 9, 9] (or [N, 81, 9] / [N, 729]), got "
                              f"shape {tuple(value.shape)}.", path)
    hot = value.reshape(value.shape[0], 81, 9)
    not_binary = ~((hot == 0) | (hot == 1)).reshape(hot.shape[0], -1).all(-1)
    if bool(not_binary.any()):
        n = int(not_binary.nonzero()[0, 0])
        raise SudokuFileError(f"{path}: board {n} is not one-hot (values other than 0 and 1). Expected SATNet's "
                              "one-hot encoding.", path)
    return hot


def load_satnet_tensors(features_path, labels_path=None, *, limit: int | None = None, validate: bool = True):
    """Load SATNet's original one-hot tensors (``features.pt``, ``labels.pt``) into a `datasets.Dataset`.

    Example::

        >>> import pathlib, tempfile, torch
        >>> from jacobiscope.data import sudoku
        >>> puzzles, solutions = sudoku.generate_many(2, givens=35, seed=0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     torch.save(sudoku.to_one_hot(puzzles), pathlib.Path(folder) / "features.pt")
        ...     torch.save(sudoku.to_one_hot(solutions), pathlib.Path(folder) / "labels.pt")
        ...     ds = sudoku.load_satnet_tensors(folder)
        >>> list(ds["puzzle"]) == puzzles, list(ds["solution"]) == solutions
        (True, True)

    Arguments:
        features_path: ``features.pt`` (one-hot givens ``[N, 9, 9, 9]``, all-zero vectors at blanks), or the
            folder holding ``features.pt`` and ``labels.pt`` (SATNet's ``sudoku/`` folder).
        labels_path: ``labels.pt`` (one-hot solutions); defaults to the one beside ``features_path``.
        limit: keep only the first ``limit`` boards.
        validate: check every solution is a valid grid that agrees with its givens.

    Returns:
        Dataset with the same columns as `load_csv`. Loading uses ``torch.load(weights_only=True)``, so a
        file cannot run code.
    """
    _check_limit(limit)
    features_path = _existing(features_path, "SATNet features")
    if features_path.is_dir():
        folder = features_path
        features_path = folder / "features.pt"
        labels_path = folder / "labels.pt" if labels_path is None else labels_path
    elif labels_path is None:
        labels_path = features_path.parent / "labels.pt"
    labels_path = Path(os.fspath(labels_path))
    features, labels = _load_tensor(features_path), _load_tensor(labels_path)
    if features.shape[0] != labels.shape[0]:
        raise SudokuFileError(f"{features_path} holds {features.shape[0]} boards but {labels_path} holds "
                              f"{labels.shape[0]}; they must pair up one to one.", features_path)
    for path, hot, blanks_allowed in ((features_path, features, True), (labels_path, labels, False)):
        counts = hot.sum(-1)
        bad = (counts > 1).any(-1) if blanks_allowed else (counts != 1).any(-1)
        if bool(bad.any()):
            n = int(bad.nonzero()[0, 0])
            expected = ("at most one digit per cell (blanks all zero)" if blanks_allowed
                        else "exactly one digit per cell (a solution has no blanks)")
            raise SudokuFileError(f"{path}: board {n} does not have {expected}. Check that features and labels "
                                  "are not swapped.", path)
    if limit is not None:
        features, labels = features[:limit], labels[:limit]
    puzzles, solutions = from_one_hot(features), from_one_hot(labels)
    if validate:
        _check_rows(puzzles, solutions,
                    lambda n: (features_path, None, f"{features_path} / {labels_path} board {n}"))
    return _make_dataset(puzzles, solutions)


RRN_SPLITS = ("train", "valid", "test")


def load_rrn_csv(folder_or_file, split: str = "test", *, limit: int | None = None, validate: bool = True):
    """Load a split of the RRN hard-Sudoku set (``train.csv``, ``valid.csv``, ``test.csv``; no header).

    Example::

        >>> import pathlib, tempfile
        >>> from jacobiscope.data import sudoku
        >>> puzzles, solutions = sudoku.generate_many(2, givens=30, seed=0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     rows = "".join(f"{p},{s}\\n" for p, s in zip(puzzles, solutions))
        ...     _ = (pathlib.Path(folder) / "valid.csv").write_text(rows)
        ...     ds = sudoku.load_rrn_csv(folder, split="valid")
        >>> len(ds)
        2

    Arguments:
        folder_or_file: RRN's ``sudoku-hard`` folder (then ``split`` picks the file), or one csv file.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        limit: keep only the first ``limit`` rows.
        validate: as for `load_csv`.

    Returns:
        Dataset with the same columns as `load_csv`.
    """
    if split not in RRN_SPLITS:
        raise SudokuError(f"split must be one of {RRN_SPLITS}, got {split!r} (RRN names its validation split "
                          "'valid').")
    path = _existing(folder_or_file, "RRN data")
    if path.is_dir():
        path = _existing(path / f"{split}.csv", f"RRN {split} split")
    return _make_dataset(*_load_rows(path, False, limit, validate))


# ----------------------------------------------------------------------------------- benchmark protocol
#: The copy of the benchmark files shipped inside the package (see its PROVENANCE.md).
BUNDLED_DIR = Path(__file__).resolve().parent / "benchmarks"


def data_dir(path=None) -> Path:
    """The folder (or file) the Sudoku benchmark files are read from.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> sudoku.data_dir().name, (sudoku.data_dir() / "satnet.csv.xz").is_file()   # the bundled copy
        ('benchmarks', True)

    Arguments:
        path: an explicit folder or file; wins over everything else.

    Returns:
        ``path`` if given, else ``$JACOBISCOPE_SUDOKU_DATA`` if set, else the copy bundled with the package
        (`BUNDLED_DIR`: ``satnet.csv.xz``, ``rrn-test.csv.xz`` and their ``PROVENANCE.md``). Raises
        `SudokuDataNotFoundError` naming what was tried when it is missing.
    """
    if path is not None:
        return _existing(path, "Sudoku data path")
    env = os.environ.get(ENV_VAR)
    if env:
        location = Path(env).expanduser()
        if not location.exists():
            raise SudokuDataNotFoundError(
                f"${ENV_VAR} is {env!r}, which does not exist — point it to the folder holding {SATNET_FILE} and "
                f"{RRN_TEST_FILE}, or unset it to use the copy bundled with jacobiscope."
            )
        return location
    if BUNDLED_DIR.is_dir():
        return BUNDLED_DIR
    raise SudokuDataNotFoundError(
        f"the Sudoku benchmark files bundled with jacobiscope are missing (jacobiscope/data/benchmarks) — reinstall "
        f"jacobiscope, pass path=..., or set ${ENV_VAR} to a folder holding {SATNET_FILE} and {RRN_TEST_FILE}."
    )


def _benchmark_file(path, filename: str, fallback: str | None = None) -> Path:
    location = data_dir(path)
    if location.is_file():
        return location
    for name in (filename, fallback):
        if name and (location / name).is_file():
            return location / name
    raise SudokuDataNotFoundError(
        f"{location} has no {filename}{f' (nor {fallback})' if fallback else ''} — pass the file itself, or a "
        f"folder holding it (argument or ${ENV_VAR})."
    )


def satnet_splits(path=None, *, limit: int | None = None):
    """The SATNet benchmark: ``(train, id_test)`` Datasets from rows 0-8999 and 9000-9999.

    Example::

        >>> import pathlib, tempfile
        >>> from jacobiscope.data import sudoku
        >>> puzzle, solution = sudoku.generate(givens=36, seed=0)
        >>> with tempfile.TemporaryDirectory() as folder:   # a stand-in file of 10,000 identical rows
        ...     _ = (pathlib.Path(folder) / "satnet.csv.xz").write_bytes(
        ...         __import__("lzma").compress(f"{puzzle},{solution}\\n".encode() * 10_000))
        ...     train, test = sudoku.satnet_splits(folder)
        >>> len(train), len(test)
        (9000, 1000)

    Arguments:
        path: ``satnet.csv.xz`` or its folder; default ``$JACOBISCOPE_SUDOKU_DATA``, else the copy bundled
            with the package (see `data_dir`).
        limit: keep only the first ``limit`` rows of each split (quick runs).

    Returns:
        ``(train, id_test)``, Datasets with the columns of `load_csv`. Train on ``train`` only: ``id_test`` is
        the reported in-distribution test set. The file must have exactly 10,000 rows (the split is by index).
    """
    _check_limit(limit)
    file = _benchmark_file(path, SATNET_FILE)
    puzzles, solutions = _load_rows(file, "auto", None, True)
    if len(puzzles) != SATNET_ROWS:
        raise SudokuFileError(
            f"{file} has {len(puzzles)} rows, expected {SATNET_ROWS}: the SATNet split is by index (train = rows "
            "0-8999, test = 9000-9999), so it needs the full set in its original order. Use load_csv for "
            "other files.", file)
    train = slice(0, SATNET_TRAIN_ROWS if limit is None else min(limit, SATNET_TRAIN_ROWS))
    test_end = SATNET_ROWS if limit is None else SATNET_TRAIN_ROWS + min(limit, SATNET_ROWS - SATNET_TRAIN_ROWS)
    test = slice(SATNET_TRAIN_ROWS, test_end)
    return _make_dataset(puzzles[train], solutions[train]), _make_dataset(puzzles[test], solutions[test])


def rrn_test(path=None, *, limit: int | None = None):
    """The out-of-distribution test set: the 18,000 RRN test puzzles (17-34 givens).

    Example::

        >>> import pathlib, tempfile
        >>> from jacobiscope.data import sudoku
        >>> puzzle, solution = sudoku.generate(givens=25, seed=0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (pathlib.Path(folder) / "test.csv").write_text(f"{puzzle},{solution}\\n" * 3)
        ...     len(sudoku.rrn_test(folder, limit=2))
        2

    Arguments:
        path: ``rrn-test.csv.xz``, a folder holding it, or RRN's original folder holding ``test.csv``;
            default as for `satnet_splits`.
        limit: keep only the first ``limit`` rows.

    Returns:
        A Dataset with the columns of `load_csv`. Never train or tune on it.
    """
    _check_limit(limit)
    file = _benchmark_file(path, RRN_TEST_FILE, "test.csv")
    return _make_dataset(*_load_rows(file, "auto", limit, True))


# --------------------------------------------------------------------------------------- augmentation
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
    return view
