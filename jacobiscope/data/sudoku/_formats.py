"""Datasets and the benchmark file formats (puzzle,solution csv; SATNet's one-hot tensors; RRN's csv)."""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
from pathlib import Path

import torch

from ._board import SudokuDataNotFoundError, SudokuError, SudokuFileError, _BOARD, _SOLVED_BOARD, _cell
from ._tensors import from_one_hot, to_strings, to_tensor
from ._metrics import _unit_ok


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
        advice = "Fix or drop that row (from Python, validate=False skips this check)."
        raise SudokuFileError(f"{text}: {problem}. {advice}", path, line)


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


def _path(path, what: str) -> Path:
    """``path`` as a Path; a `SudokuError` naming the type for anything that is not a str or os.PathLike."""
    if isinstance(path, (bytes, bytearray)):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise SudokuError(f"{what} must be a path (str or pathlib.Path), got {type(path).__name__}. Pass the file's "
                          "location, e.g. 'boards.csv'.")
    return Path(os.fspath(path)).expanduser()


def _existing(path, what: str) -> Path:
    path = _path(path, what)
    try:
        exists = path.exists()
    except (OSError, ValueError):  # a name too long for the file system
        exists = False
    if not exists:
        raise SudokuDataNotFoundError(f"{what} {str(path)!r} does not exist — check the path.")
    _regular(path, what)
    return path


def _regular(path: Path, what: str) -> None:
    """A FIFO, a socket or a device is refused before it is opened: reading a FIFO without a writer blocks forever."""
    import stat

    mode = path.stat().st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise SudokuFileError(f"{what} {str(path)!r} is {kind}, not a regular file — reading it could block forever; "
                              "pass the path of a csv file (or a folder holding the benchmark files).", path)


#: Header names of the puzzle and solution columns in published Sudoku csv files (Kaggle's quizzes,solutions;
#: HRM's sudoku-extreme source,question,answer,rating; puzzle,solution), matched without case.
PUZZLE_COLUMNS = ("puzzle", "puzzles", "quiz", "quizzes", "question", "questions", "problem", "board", "input", "q")
SOLUTION_COLUMNS = ("solution", "solutions", "answer", "answers", "target", "label", "labels", "a")
_DELIMITERS = (",", "\t", ";", " ")


def _delimiter(text: str) -> str:
    """The field separator of a file, from its first line: a comma, else a tab, else a semicolon, else spaces (a
    comma when the line has none of them: a puzzle alone)."""
    return next((d for d in _DELIMITERS if d in text), ",")


def _split(text: str, delimiter: str) -> list[str]:
    """A line's fields; a space separator means any run of spaces ('puzzle  solution' aligned by hand)."""
    parts = text.split() if delimiter == " " else text.split(delimiter)
    return [part.strip().strip('"') for part in parts]


def _named_columns(header_line: str, delimiter: str, path) -> tuple[int, int] | None:
    """``(puzzle column, solution column)`` a header names, None for a two-column header that names neither (its
    rows are read as puzzle,solution); a wider header must name at least the puzzle column."""
    names = [name.lower() for name in _split(header_line, delimiter)]
    puzzle = next((i for i, name in enumerate(names) if name in PUZZLE_COLUMNS), None)
    solution = next((i for i, name in enumerate(names) if name in SOLUTION_COLUMNS and i != puzzle), None)
    if puzzle is None and len(names) > 2:
        raise SudokuFileError(
            f"{path}:1: a header of {len(names)} columns ({header_line[:80]!r}) names no puzzle column — expected "
            f"one of {', '.join(PUZZLE_COLUMNS)} (and a solution column: {', '.join(SOLUTION_COLUMNS)}). Rename "
            "the columns, or give 'puzzle,solution' rows.", path, 1)
    if puzzle is None:
        return None
    return puzzle, solution if solution is not None else -1


def _read_csv(path, header, limit):
    """Rows of a ``puzzle,solution`` text file: (puzzle strings, solution strings, 1-based line numbers)."""
    path = _existing(path, "Sudoku csv file")
    if path.is_dir():
        raise SudokuFileError(f"{str(path)!r} is a folder; load_csv needs a file (use load_rrn_csv for a folder).",
                              path)
    if header not in ("auto", True, False):
        raise SudokuError(f"header must be 'auto', True or False, got {header!r}.")
    puzzles, solutions, lines = [], [], []
    first, header_line, delimiter, columns = True, None, ",", None
    try:
        with _open_text(path) as handle:
            for number, text in enumerate(handle, start=1):
                if limit is not None and len(puzzles) >= limit:
                    break
                text = text.strip()
                if not text:
                    continue  # blank lines (e.g. a trailing newline) carry no row
                is_first, first = first, False
                if is_first:
                    delimiter = _delimiter(text)
                fields = _split(text, delimiter)
                # "auto" skips only a line of words (no board field), so a typo in the first data row still
                # raises instead of silently dropping that row.
                if is_first and (header is True or (header == "auto" and re.search(r"[A-Za-z]", text)
                                                    and not any(_BOARD.fullmatch(f) for f in fields))):
                    header_line = text
                    columns = _named_columns(text, delimiter, path)
                    continue
                puzzle, solution = _row(fields, columns, header_line, path, number, text)
                puzzles.append(puzzle)
                solutions.append(solution)
                lines.append(number)
    except (UnicodeDecodeError, lzma.LZMAError, OSError, EOFError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise SudokuFileError(
            f"{path}: cannot read it as text ({type(error).__name__}: {error}). Expected a plain, .xz, .gz or "
            ".bz2 csv file of 'puzzle,solution' lines.", path) from error
    if not puzzles:
        # An empty Dataset would make every later number (accuracy, loss) NaN or silently meaningless.
        found = (f"only a header line ({header_line[:60]!r})" if header_line is not None and header is not True
                 else f"only one line, skipped as a header by header=True ({header_line[:60]!r})"
                 if header_line is not None else "no lines at all (an empty or blank file)")
        raise SudokuFileError(f"{path}: no 'puzzle,solution' rows, {found}. Check the path and the file's contents"
                              + (", or pass header=False." if header is True else "."), path)
    return puzzles, solutions, lines


def _row(fields, columns, header_line, path, number, text) -> tuple[str, str | None]:
    """One line's (puzzle, solution or None): by the header's named columns when it names them, else as
    ``puzzle,solution`` or a puzzle alone."""
    if columns is not None:
        puzzle_at, solution_at = columns
        width = len(_split(header_line, _delimiter(header_line)))
        if len(fields) < width:  # trailing columns left out (a puzzle alone under puzzle,solution): empty
            fields = fields + [""] * (width - len(fields))
        puzzle = fields[puzzle_at] if len(fields) == width else None
        solution = fields[solution_at] if solution_at >= 0 and len(fields) == width else None
        if puzzle is None or not _BOARD.fullmatch(puzzle) or (solution and not _SOLVED_BOARD.fullmatch(solution)):
            raise SudokuFileError(
                f"{path}:{number}: expected the header's {width} columns with an 81-cell puzzle in column "
                f"{puzzle_at + 1} ('0' or '.' for blanks)"
                + (f" and a complete solution of digits 1-9 in column {solution_at + 1}" if solution_at >= 0 else "")
                + f", got {text[:120]!r}. Fix that line.", path, number)
        return puzzle, solution or None
    puzzle_only = len(fields) == 1 and _BOARD.fullmatch(fields[0])
    if not puzzle_only and (len(fields) != 2 or not _BOARD.fullmatch(fields[0])
                            or not _SOLVED_BOARD.fullmatch(fields[1])):
        raise SudokuFileError(
            f"{path}:{number}: expected 'puzzle,solution' (two 81-digit strings, the puzzle with "
            f"'0' or '.' for blanks and a complete solution of digits 1-9) or a puzzle alone, got "
            f"{text[:120]!r}. Fix that line.", path, number,
        )
    return fields[0], None if puzzle_only else fields[1]


def _check_limit(limit):
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise SudokuError(f"limit must be None (all rows) or a positive int (the number of rows to keep), got "
                          f"{limit!r}. Pass e.g. limit=100.")


def _solved(puzzle: str, path: Path, line: int) -> str:
    """The unique solution of a puzzle given without one (one search, up to two solutions); a puzzle with none or
    several cannot be scored."""
    from ._board import _parse, _to_string
    from ._solver import _solutions

    try:
        found = _solutions(_parse(puzzle), 2)
    except SudokuError as error:  # malformed or contradictory givens: the message says which
        found, problem = None, str(error).rstrip(".")
    if found is not None and len(found) == 1:
        return _to_string(found[0])
    if found is not None:
        problem = ("it has more than one solution, so there is no single grid to score the model against" if found
                   else "it has no solution (its givens do not clash directly, but no filling satisfies every unit)")
    raise SudokuFileError(f"{path}:{line}: a puzzle without its solution, which the exact solver cannot supply: "
                          f"{problem}. Give the row as 'puzzle,solution', or drop it.", path, line)


def _load_rows(path, header, limit, validate):
    _check_limit(limit)
    path = _path(path, "Sudoku csv file")
    puzzle_text, solution_text, lines = _read_csv(path, header, limit)
    solution_text = [solution if solution is not None else _solved(puzzle, path, line)
                     for puzzle, solution, line in zip(puzzle_text, solution_text, lines)]
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
            by ``,`` or ``, `` (a tab, ``;`` or spaces when the first line has no comma); blank lines are skipped; '.'
            blanks become '0'. A header that names its columns picks them (`PUZZLE_COLUMNS`,
            `SOLUTION_COLUMNS`: HRM's sudoku-extreme ``source,question,answer,rating`` reads question and answer).
            A line holding a puzzle alone gets its unique solution from the exact solver; a puzzle with no solution or several raises, naming its line (board accuracy needs
            one reference grid).
        header: ``"auto"`` takes a first (non-blank) line of words as the header (e.g. ``quizzes,solutions``);
            True always does; False never does.
        limit: keep only the first ``limit`` rows (a positive int; reading stops there).
        validate: check every solution is a valid grid that agrees with its puzzle's givens.

    Returns:
        Dataset with ``puzzle``, ``solution`` (strings), ``input_ids`` (0 = blank) and ``labels`` (81 ints).

    A malformed line raises `SudokuFileError` naming the file and line; so does a file without a single row (empty,
    blank, or a header only), which would otherwise give an empty Dataset and NaN scores downstream.
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
    if value.shape[0] == 0:
        raise SudokuFileError(f"{path}: holds no boards (shape {tuple(value.shape)}). Check that it is SATNet's "
                              "features.pt / labels.pt and was saved completely.", path)
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
    labels_path = _path(labels_path, "SATNet labels")
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
