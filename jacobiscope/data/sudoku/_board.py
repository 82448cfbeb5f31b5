"""Board geometry, puzzle parsing and the data constants of the Sudoku tools (errors: jacobiscope.errors)."""
from __future__ import annotations

import numbers
import random
import re

import torch

# Defined in jacobiscope.errors (every public exception lives there); importable from here as before.
from ...errors import SudokuDataNotFoundError, SudokuError, SudokuFileError, UnsolvableSudokuError  # noqa: F401


ENV_VAR = "JACOBISCOPE_SUDOKU_DATA"


SATNET_FILE = "satnet.csv.xz"


RRN_TEST_FILE = "rrn-test.csv.xz"


# The SATNet benchmark is defined by index: the first 9,000 boards train, the last 1,000 test (SATNet's
# exps/sudoku.py, testPct 0.1; AKOrN and IRED reuse it).
SATNET_ROWS = 10_000


SATNET_TRAIN_ROWS = 9_000


# Below 17 givens no 9x9 Sudoku has a unique solution (McGuire, Tugemann & Civario, 2012).
MIN_UNIQUE_GIVENS = 17


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
        f"{type(generator).__name__}. Pass e.g. an int seed such as 0."
    )
