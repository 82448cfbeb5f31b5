"""Benchmark data for looped-transformer experiments: Sudoku (solver, generator, metrics, loaders).

Example::

    >>> from jacobiscope.data import sudoku
    >>> sudoku.count_solutions("0" * 81, limit=2)
    2
"""
from . import sudoku
from .sudoku import (
    SudokuDataNotFoundError,
    SudokuError,
    SudokuFileError,
    UnsolvableSudokuError,
)

__all__ = [
    "sudoku",
    "SudokuError",
    "SudokuDataNotFoundError",
    "SudokuFileError",
    "UnsolvableSudokuError",
]
