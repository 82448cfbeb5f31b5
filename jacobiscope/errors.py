"""The exceptions and warnings jacobiscope raises.

Every error says what was expected, what came, and how to fix it (the einops way). They subclass the
built-in exception a user would catch anyway (``ValueError``, ``TypeError``, ``MemoryError``), so code that
does not know jacobiscope still handles them.
"""


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


class NonFiniteWarning(RuntimeWarning):
    """A trajectory went NaN/Inf; the affected results are flagged rather than silently returned."""


class ConvergenceWarning(RuntimeWarning):
    """An iterative method stopped at its iteration limit before reaching the requested tolerance."""


class SlowDerivativesWarning(UserWarning):
    """A step forward-mode AD cannot enter (a custom autograd.Function without jvp): its products are taken by
    double backward instead — exact, but slower."""
