"""The exceptions and warnings jacobiscope raises.

Every error says what was expected, what came, and how to fix it (the einops way). They subclass the
built-in exception a user would catch anyway (``ValueError``, ``TypeError``, ``MemoryError``), so code that
does not know jacobiscope still handles them.

Every public exception of the package is defined here, once, and re-exported where it was first defined
(``jacobiscope._io.PathError is jacobiscope.errors.PathError``), so an ``except`` written against any import path
catches it. This module imports nothing: the command line can name these classes without loading torch.

Example::

    >>> from jacobiscope.errors import ArgumentError, JacobiscopeError
    >>> try:
    ...     raise ArgumentError("steps must be >= 1, got 0 — pass steps=1 or more")
    ... except ValueError as error:  # a jacobiscope error is also the built-in a caller would catch
    ...     print(isinstance(error, JacobiscopeError), error)
    True steps must be >= 1, got 0 — pass steps=1 or more
"""

__all__ = [
    "AdapterCheckError", "AdapterError", "InputError", "HubError", "DiagnosticError", "DiagnosticDefinitionError",
    "ReportFormatError", "ReportSourceError",
    "JacobiscopeError", "StepError", "StepOutputError", "StateError", "NonFiniteStateError", "ArgumentError",
    "ArgumentTypeError", "ArgumentIndexError",
    "MemoryBudgetError", "BudgetError", "FolderBusyError", "UsageError",
    "PathError", "NotAFileError", "MissingFileError", "NoPermissionError", "NotAFolderError", "NotARegularFileError",
    "OutputInsideInputError",
    "SudokuError", "UnsolvableSudokuError", "SudokuFileError", "SudokuDataNotFoundError", "RecipeError",
    "NonFiniteWarning", "ConvergenceWarning", "SlowDerivativesWarning",
]


class JacobiscopeError(Exception):
    """Base class of every jacobiscope error."""


class StepError(JacobiscopeError, TypeError):
    """The step of a map is unusable: not a callable, it raised on a valid state, it modified its input in place,
    it cuts the autograd graph, or it mixes trajectories that ``batch_dims`` declares independent. The error a
    step raised itself, if any, is chained as ``__cause__``."""


class StepOutputError(StepError):
    """A step function returned something that is not a state of the same shape and dtype."""


class StateError(JacobiscopeError, ValueError):
    """A state tensor is unusable: wrong shape, integer dtype, too little precision, NaN or Inf."""


class NonFiniteStateError(StateError):
    """A trajectory produced NaN or Inf. ``step`` is the first loop index at which it happened."""

    def __init__(self, message: str, step: int | None = None):
        super().__init__(message)
        self.step = step


class ArgumentError(JacobiscopeError, ValueError):
    """An argument is out of range (``k`` larger than the state, ``steps <= 0``, ...)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type (a str where a folder path or a bool goes, ...): an `ArgumentError` that a
    caller catching ``TypeError`` also catches."""


class ArgumentIndexError(ArgumentError, IndexError):
    """An index out of range (a report row that is not there): an `ArgumentError` that is also an ``IndexError``."""


class MemoryBudgetError(JacobiscopeError, MemoryError):
    """A dense computation would exceed the memory budget the caller allowed."""

    def __init__(self, message: str, required_bytes: int, budget_bytes: int):
        super().__init__(message)
        self.required_bytes = required_bytes
        self.budget_bytes = budget_bytes


class BudgetError(ArgumentError, MemoryBudgetError):
    """A size over its budget where every unit also keeps a state in memory (``loops``: the diagnostics keep the
    whole trajectory): refused before any work starts. Both an `ArgumentError` (a value out of range) and a
    `MemoryBudgetError` (``required_bytes`` is a lower bound)."""


class FolderBusyError(JacobiscopeError, RuntimeError):
    """Another live process holds a folder's lock (``pid``, ``host``): two writers (two trainings of one run
    folder) would corrupt its files."""

    def __init__(self, message: str, pid: int, host: str):
        super().__init__(message)
        self.pid = pid
        self.host = host


class UsageError(JacobiscopeError):
    """A mistake on the command line: printed as one line ``jacobiscope: error: <what> — <how to fix>``, exit 2."""

    def __init__(self, what: str, fix: str | None = None):
        super().__init__(what if fix is None else f"{what} — {fix}")


# ------------------------------------------------------------------------------------------------ files (_io)
class PathError(JacobiscopeError, OSError):
    """A file cannot be read or written where asked: the message names the path, the reason and the fix.

    It is an `OSError` (``errno`` is set), and the specific built-in one where there is one: a folder given
    for a file is also an `IsADirectoryError`, a missing file a `FileNotFoundError`, no permission a
    `PermissionError`, a file where a folder must be a `NotADirectoryError`.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotAFileError(PathError, IsADirectoryError):
    """A folder was given where a file must be."""


class MissingFileError(PathError, FileNotFoundError):
    """The file to read does not exist (or no path was given)."""


class NoPermissionError(PathError, PermissionError):
    """No permission to read or write there."""


class NotAFolderError(PathError, NotADirectoryError):
    """A file stands where the path needs a folder."""


class NotARegularFileError(PathError):
    """The path names a FIFO, a socket or a block device: a file written there would hang (a FIFO without a
    reader), fail, or overwrite a disk. Nothing is written."""


class OutputInsideInputError(PathError, ValueError):
    """An output path is, or lies inside, an input of the same command (or a folder output that is replaced holds
    an input): writing it would destroy what the command reads. Refused before anything runs."""


# ----------------------------------------------------------------------------------- Sudoku data and recipes
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


class RecipeError(JacobiscopeError, ValueError):
    """A Sudoku recipe is unusable: a value of the wrong type or out of range, an unknown key, an unreadable recipe
    file, an output folder inside the run's inputs, or a resumed run whose recipe changes what cannot change."""


# ------------------------------------------------------------------------------------------------- warnings
class NonFiniteWarning(RuntimeWarning):
    """A trajectory went NaN/Inf; the affected results are flagged rather than silently returned."""


class ConvergenceWarning(RuntimeWarning):
    """An iterative method stopped at its iteration limit before reaching the requested tolerance."""


class SlowDerivativesWarning(UserWarning):
    """A step forward-mode AD cannot enter (a custom autograd.Function without jvp): its products are taken by
    double backward instead — exact, but slower."""


# ------------------------------------------------------------------------------------------------- adapters, hub,
# diagnostics, report (raised from their modules, which re-export them under their old import paths)
class AdapterCheckError(JacobiscopeError, AssertionError):
    """`check_adapter` found a check that fails; the message lists them."""


class InputError(JacobiscopeError, ValueError):
    """The inputs cannot be fed to the model (empty, wrong kind, no tokenizer for text, ...)."""


class AdapterError(JacobiscopeError, ValueError):
    """The model's blocks (or the parts an adapter mode needs) could not be found."""


class HubError(JacobiscopeError, ValueError):
    """A checkpoint name, folder or file is unusable."""


class DiagnosticError(JacobiscopeError, RuntimeError):
    """A diagnostic (usually a user's own) misbehaved: its ``compute`` raised, returned something a report cannot
    hold, modified the trajectory, or its figure failed. The message names the diagnostic and what it did; an error
    it raised itself is chained as ``__cause__``."""


class DiagnosticDefinitionError(DiagnosticError, TypeError):
    """A diagnostic's class is unusable as declared (no ``compute``, ``requires`` that name itself or nothing
    registered, options declared with an unknown kind, ...): refused at `register_diagnostic`."""


class ReportFormatError(JacobiscopeError, ValueError):
    """A file or text given to `Report.from_json` is not a jacobiscope report (not JSON, truncated, another tool's,
    edited into wrong types), or a report cannot be written as JSON; the message names the problem and the fix."""


class ReportSourceError(JacobiscopeError, TypeError):
    """`Report.from_json` was given something that is neither a path nor JSON text."""
