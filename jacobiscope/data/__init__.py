"""Benchmark data for looped-transformer experiments: Sudoku (solver, generator, metrics, loaders) and seeded text
tasks for looped language models (`tasks`, imported on first use).

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
    "tasks",
    "SudokuError",
    "SudokuDataNotFoundError",
    "SudokuFileError",
    "UnsolvableSudokuError",
]


def __getattr__(name: str):
    # `tasks` is imported on first use (PEP 562): reading Sudoku data does not pay for the text tasks.
    if name == "tasks":
        import importlib
        module = importlib.import_module(".tasks", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'jacobiscope.data' has no attribute {name!r}")
