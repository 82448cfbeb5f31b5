"""The benchmark protocol: the bundled data folder, SATNet's train / test split, the RRN test set."""
from __future__ import annotations

import os
from pathlib import Path

from ._board import (
    ENV_VAR, RRN_TEST_FILE, SATNET_FILE, SATNET_ROWS, SATNET_TRAIN_ROWS, SudokuDataNotFoundError, SudokuFileError
)
from ._formats import _check_limit, _existing, _load_rows, _make_dataset


#: The copy of the benchmark files shipped inside the package (see its PROVENANCE.md).
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


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
