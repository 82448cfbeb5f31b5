"""What a diagnostic is, and the one registry that `measure`, `analyze`, `describe` and the report all read."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..errors import ArgumentError

__all__ = ["Diagnostic", "MeasureContext", "register_diagnostic", "unregister_diagnostic", "list_diagnostics",
           "get_diagnostic"]


@dataclass
class MeasureContext:
    """Everything a diagnostic may read about one trajectory of one map (built once by `measure`).

    Attributes:
        looped: the `LoopedMap`, with one leading batch dimension of size 1.
        x0: the initial state ``[1, *state_shape]``.
        states: ``[loops + 1, *state_shape]``, the trajectory (NaN/Inf kept where it went so).
        loops: how many loops were applied.
        last_finite: the last loop whose state is finite (``loops`` when all are).
        nonfinite_loop: the first loop whose state is not finite, or -1.
        state_norm: ``loops + 1`` RMS per-token norms of the states (per entry for states without a token axis).
        step_size: ``loops`` relative steps ``||X_{t+1} - X_t|| / ||X_t||``.
        options: the keyword arguments of `measure` (``k``, ``eigen_k``, ``seed``, ...).
        results: what the diagnostics measured so far, by name (a diagnostic may read those it ``requires``).
        flags: problems met so far; a diagnostic appends its own.
    """

    looped: object
    x0: torch.Tensor
    states: torch.Tensor
    loops: int
    last_finite: int
    nonfinite_loop: int
    state_norm: list
    step_size: list
    options: dict
    results: dict = field(default_factory=dict)
    flags: list = field(default_factory=list)

    @property
    def state_size(self) -> int:
        return int(self.states[0].numel())


class Diagnostic:
    """One measurement of a looped map: its name, cost estimate, computation, table columns and figure.

    Example::

        >>> import torch, jacobiscope
        >>> class FinalNorm(jacobiscope.Diagnostic):
        ...     name = "final_norm"
        ...     def compute(self, context):
        ...         return {"value": float(context.states[context.last_finite].norm())}
        ...     def columns(self, result):
        ...         return {"final |X|": result["value"]}
        >>> _ = jacobiscope.register_diagnostic(FinalNorm())
        >>> row = jacobiscope.measure(lambda x: 0.5 * x + 1, torch.zeros(2, dtype=torch.float64), loops=30)
        >>> round(row.extra["final_norm"]["value"], 6)   # the fixed point (2, 2)
        2.828427
        >>> _ = jacobiscope.diagnostics.unregister_diagnostic("final_norm")

    Subclass it and override ``compute`` (required; it may return a `DiagnosticResult` dataclass named in
    ``result_type``, or plain JSON-able values), ``cost`` (block forwards it takes, for `describe`),
    ``columns`` (summary-table cells) and ``figure`` (a matplotlib figure over several rows). ``requires`` names the
    diagnostics whose results ``compute`` reads from ``context.results``; ``default`` says whether `analyze` runs it
    when no subset is asked for. Results must be JSON-able (dicts, lists, numbers, strings): they travel in reports.
    """

    name: str = ""
    result_type: type | None = None  # a `DiagnosticResult` dataclass: results are stored as its to_dict()
    requires: tuple = ()
    default: bool = True
    always: bool = False  # runs whatever subset is asked for (the regime verdict reads what the others found)

    def cost(self, state_size: int, loops: int, options: dict):
        """What this diagnostic costs on one trajectory, for `describe`: a number of block forwards, or a dict of
        operation counts ``{"forward": n, "jvp": n, "vjp": n, "jvp_block": n}`` (``jvp_block``: ``k`` tangents
        pushed through one vmapped jvp), which `describe` prices with timed operations of the actual block."""
        return 0.0

    def compute(self, context: MeasureContext):
        raise NotImplementedError(f"{type(self).__name__}.compute(context) must return the diagnostic's result.")

    def from_row(self, row):
        """This diagnostic's result on a report row, typed (``result_type.from_dict``) when it declares a type."""
        raw = (row.extra or {}).get(self.name)
        if raw is None or self.result_type is None:
            return raw
        return self.result_type.from_dict(raw)

    def columns(self, result) -> dict:
        """Summary-table cells of one row: ``{header: value}`` (numbers or short strings)."""
        return {}

    def figure(self, rows: list, labels: list):
        """A figure over several rows (``rows[i].diagnostic(self.name)`` is each row's result), or None."""
        return None

    def __repr__(self) -> str:
        return f"<Diagnostic {self.name!r}>"


_REGISTRY: dict[str, Diagnostic] = {}


def register_diagnostic(diagnostic: Diagnostic, *, replace: bool = False) -> Diagnostic:
    """Add ``diagnostic`` to the registry that `measure`, `analyze`, `describe` and reports read; return it.

    Registering a name twice is an error unless ``replace=True`` (built-ins can be replaced that way too).
    """
    if not isinstance(diagnostic, Diagnostic):
        raise TypeError(f"register_diagnostic takes a jacobiscope.Diagnostic instance, got {type(diagnostic).__name__} — "
                        "subclass jacobiscope.Diagnostic and pass an instance")
    name = diagnostic.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"a diagnostic's name must be an identifier, got {name!r} — set the class attribute name")
    if name in _REGISTRY and not replace:
        raise ArgumentError(f"a diagnostic named {name!r} is already registered — pass replace=True to replace it")
    unknown = [req for req in diagnostic.requires if req not in _REGISTRY and req != name]
    if unknown:
        raise ArgumentError(f"{name!r} requires {unknown}, which are not registered — register them first")
    _REGISTRY[name] = diagnostic
    return diagnostic


def unregister_diagnostic(name: str) -> Diagnostic:
    """Remove the diagnostic ``name`` from the registry (and return it); its results in old reports still load."""
    list_diagnostics()
    if name not in _REGISTRY:
        raise ArgumentError(f"no diagnostic named {name!r} is registered — registered: {', '.join(_REGISTRY)}")
    dependants = [other.name for other in _REGISTRY.values() if name in other.requires and other.name != name]
    if dependants:
        raise ArgumentError(f"{dependants} require {name!r} — unregister them first")
    return _REGISTRY.pop(name)


def list_diagnostics() -> list[str]:
    """The registered diagnostics' names, in the order they run."""
    from . import _builtin  # noqa: F401 - the built-ins register themselves on first use

    return list(_REGISTRY)


def get_diagnostic(name: str) -> Diagnostic:
    """The registered diagnostic called ``name``; an error listing the known names otherwise."""
    names = list_diagnostics()
    if name not in _REGISTRY:
        raise ArgumentError(f"unknown diagnostic {name!r} — choose from {', '.join(names)}")
    return _REGISTRY[name]


def resolve(diagnostics) -> list[Diagnostic]:
    """The diagnostics to run for a ``diagnostics=`` argument (None: every default one), with what they require,
    in registry order."""
    names = list_diagnostics()
    if diagnostics is None:
        wanted = [n for n in names if _REGISTRY[n].default]
    else:
        wanted = [diagnostics] if isinstance(diagnostics, str) else list(diagnostics)
        unknown = [n for n in wanted if n not in _REGISTRY]
        if unknown:
            raise ArgumentError(f"Unknown diagnostics {sorted(unknown)}; choose from {names}.")
    chosen = set()

    def add(name):
        if name in chosen:
            return
        for requirement in _REGISTRY[name].requires:
            add(requirement)
        chosen.add(name)

    for name in wanted + [n for n in names if _REGISTRY[n].always]:
        add(name)
    return [_REGISTRY[n] for n in names if n in chosen]


def finite_or_nan(value) -> float:
    value = float(value)
    return value if math.isfinite(value) else math.nan
