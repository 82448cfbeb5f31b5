"""The exact solver (backtracking with constraint propagation) and the propagation-depth measure of difficulty."""
from __future__ import annotations


from ._board import (
    SudokuError, UnsolvableSudokuError, _BOX, _COL, _DIGITS_IN, _DIGIT_OF_BIT, _FULL, _POPCOUNT, _ROW, _UNITS,
    _parse, _setup, _to_string
)


def _search(cells, rows, cols, boxes, limit, found, rng) -> None:
    """Depth-first search with propagation; appends completed boards to ``found`` until it holds ``limit``.

    Propagation places naked singles (a cell with one candidate) and hidden singles (a digit with one place
    in a unit) until neither applies, then branches on the cell with the fewest candidates (MRV). Every
    placement made in this frame is undone on return, so the caller's state is unchanged: the recursion
    shares one board instead of copying it at each branch.
    """
    placed = []
    try:
        stuck = _propagate(cells, rows, cols, boxes, placed)
        if stuck is None:
            return
        cand, best, best_count, pair_unit, pair_bit = stuck
        if best < 0:
            found.append(cells.copy())
            return
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
    finally:
        for i in placed:
            bit = 1 << (cells[i] - 1)
            rows[_ROW[i]] ^= bit
            cols[_COL[i]] ^= bit
            boxes[_BOX[i]] ^= bit
            cells[i] = 0


def _propagate(cells, rows, cols, boxes, placed):
    """Place naked, then hidden singles until neither applies, appending each placed cell to ``placed``.

    Returns None on a contradiction, else ``(cand, best, best_count, pair_unit, pair_bit)`` for the board it is
    stuck on: the candidate masks of the blanks, the blank with the fewest candidates (``best = -1`` when the
    board is full; the hidden-singles pass is then skipped and the pair fields are unset), and the first unit
    with a digit that has exactly two places left (``pair_unit = -1`` if none) with that digit's bit.
    """
    while True:
        # The naked-singles pass stays inline: it is the hottest loop of the solver.
        progress = False
        best, best_count = -1, 10
        cand = [0] * 81
        for i in range(81):
            if cells[i]:
                continue
            r, c, b = _ROW[i], _COL[i], _BOX[i]
            m = _FULL & ~(rows[r] | cols[c] | boxes[b])
            if not m:
                return None
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
            return cand, best, best_count, -1, 0
        hidden = _hidden_singles(cells, rows, cols, boxes, cand, placed)
        if hidden is None:
            return None
        progress, pair_unit, pair_bit = hidden
        if not progress:
            return cand, best, best_count, pair_unit, pair_bit


def _hidden_singles(cells, rows, cols, boxes, cand, placed):
    """One pass over the 27 units: place every digit that has one place left in a unit.

    Returns None on a contradiction (a digit with no place in a unit), else ``(progress, pair_unit, pair_bit)``:
    whether a digit was placed, and the first unit with a digit that has exactly two places (``-1, 0`` if none).
    """
    # ``cand`` may go stale as this pass places digits, but stale sets only ever contain the true ones, so a
    # "no place for a digit" verdict is always right, and a hidden single is re-checked against the live
    # masks before it is placed.
    progress = False
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
            return None
        singles = once & ~twice & ~have
        if pair_unit < 0 and twice & ~thrice:
            pair_unit, pair_bit = k, twice & ~thrice & -(twice & ~thrice)
        while singles:
            bit = singles & -singles
            singles ^= bit
            i = next((j for j in unit if cand[j] & bit), -1)
            if i < 0:  # its only cell took another hidden single in this unit: no place left
                return None
            r, c, b = _ROW[i], _COL[i], _BOX[i]
            if (rows[r] | cols[c] | boxes[b]) & bit:
                return None
            cells[i] = _DIGIT_OF_BIT[bit]
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            cand[i] = 0
            placed.append(i)
            progress = True
    return progress, pair_unit, pair_bit

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
