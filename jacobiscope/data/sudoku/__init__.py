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

from ._board import (
    MIN_UNIQUE_GIVENS, RRN_TEST_FILE, SATNET_FILE, SATNET_ROWS, SATNET_TRAIN_ROWS, ENV_VAR, SudokuError,
    UnsolvableSudokuError, SudokuFileError, SudokuDataNotFoundError
)
from ._solver import solve, count_solutions, propagation_rounds
from ._tensors import from_one_hot, to_tensor, to_strings, to_one_hot
from ._generator import grid_key, shared_grids, generate, relabelled_rows, generate_many
from ._metrics import validate_puzzle, is_valid_solution, board_correct, board_accuracy, cell_accuracy
from ._formats import to_dataset, load_csv, load_satnet_tensors, load_rrn_csv
from ._splits import BUNDLED_DIR, data_dir, satnet_splits, rrn_test
from ._augment import augment, augmented_dataset

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
