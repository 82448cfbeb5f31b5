"""The checks every ``jacobiscope`` command makes on its arguments before anything heavy is loaded: output paths
writable and outside the inputs, input files regular files, puzzles and diagnostic names known. Each failure is a
`UsageError` naming the option and the fix.

Example::

    >>> from jacobiscope.cli._checks import check_output_path
    >>> check_output_path("report.html", "--out")        # a writable file name: nothing to say
    >>> check_output_path("  ", "--json")
    Traceback (most recent call last):
    ...
    jacobiscope.errors.UsageError: --json needs a file name, got '  ' — e.g. --json report.json
"""
from __future__ import annotations

import math
from pathlib import Path

from ..errors import UsageError

__all__ = ["check_output_path"]


def _quiet(enabled: bool) -> None:
    """``--quiet``: silence transformers', huggingface_hub's and datasets' progress bars and info logs too."""
    if not enabled:
        return
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    disable_progress_bars()

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:  # pragma: no cover - a dependency
        pass


def check_output_path(path: str | None, option: str) -> None:
    """An output file must be writable: a file name, not a folder, inside a folder that exists or can be created;
    not a FIFO, a socket or a block device; a name the file system takes."""
    if path is None:
        return
    from .._io import PathError, check_file_path

    example = f"{option} report{'.json' if option == '--json' else '.html'}"
    if not path.strip():
        raise UsageError(f"{option} needs a file name, got {path!r}", f"e.g. {example}")
    try:
        check_file_path(path, option)
    except PathError as error:
        try:
            folder = Path(path).expanduser().is_dir()
        except OSError:  # a name too long to even stat
            folder = False
        if folder:
            raise UsageError(f"{option} {path!r} is a folder", f"give a file name, e.g. {option} "
                             f"{Path(path) / ('report.json' if option == '--json' else 'report.html')}") from None
        what, _, fix = " ".join(str(error).split()).partition(" — ")
        raise UsageError(what, fix or f"give another file name, e.g. {example}") from None


def _refuse_inside_inputs(outputs: dict, inputs: dict, *, replaced=()) -> None:
    """`refuse_output_inside_inputs` for the command line: the outputs named by their options."""
    from .._io import refuse_output_inside_inputs

    refuse_output_inside_inputs({key: value for key, value in outputs.items() if value},
                                {key: value for key, value in inputs.items() if value}, replaced=replaced)


def _suggest(word: str, options) -> str:
    import difflib

    names = {str(option).lower(): str(option) for option in options}  # without case, as `did_you_mean`
    close = difflib.get_close_matches(str(word).lower(), list(names), n=1, cutoff=0.5)
    return f"did you mean {names[close[0]]!r}? " if close else ""


def _check_puzzles(puzzles: list[str]) -> list[str]:
    from ..data import sudoku

    checked = []
    for index, puzzle in enumerate(puzzles, start=1):
        try:
            checked.append(sudoku.validate_puzzle(puzzle))
        except sudoku.SudokuError as error:
            reason = str(error).split(" — ")[0].rstrip(".")
            raise UsageError(f"--puzzle #{index} is not a usable Sudoku puzzle: {reason}",
                             "give 81 digits, 0 or . for blanks, row by row") from None
    return checked


def _check_diagnostics(names) -> None:
    if names is None:
        return
    from ..diagnostics import list_diagnostics

    known = list_diagnostics()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"unknown diagnostic(s) {', '.join(unknown)}",
                         f"{_suggest(unknown[0], known)}choose from {','.join(known)}")


def _exists(path: str) -> bool:
    try:
        return Path(path).expanduser().exists()
    except (OSError, ValueError):
        return False


def _check_input_file(path: str, option: str, expected: str) -> None:
    """An input file must exist and be a regular file (a folder or a FIFO is named as such, not as missing)."""
    import stat

    try:
        mode = Path(path).expanduser().stat().st_mode
    except FileNotFoundError:
        raise UsageError(f"{option} {path!r} does not exist", f"pass {expected}") from None
    except OSError as error:
        raise UsageError(f"{option} {path!r} cannot be read ({error.strerror or error})", f"pass {expected}") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{option} {path!r} is a folder, not a file", f"pass {expected}")
    if not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise UsageError(f"{option} {path!r} is {kind}, not a regular file", f"pass {expected}")


def _is_file(path: str) -> bool:
    try:
        return Path(path).expanduser().is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte: not a file
        return False


def _nan_to_none(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_to_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(item) for item in value]
    return value
