"""What a diagnostic is, and the one registry that `measure`, `analyze`, `describe` and the report all read.

Each diagnostic declares the options it reads (``options = {"basin_starts": Option("count", 8, maximum=4096)}``):
one table, checked once by `check_options` before any loop runs, for built-in and user diagnostics alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..errors import DiagnosticDefinitionError, DiagnosticError  # noqa: F401 - their old import path
from ._option import Option  # noqa: F401 - re-exported: diagnostics declare options with it

__all__ = ["Diagnostic", "DiagnosticError", "MeasureContext", "Option", "register_diagnostic",
           "unregister_diagnostic", "list_diagnostics", "get_diagnostic", "check_options"]


#: Options of `measure` itself (its keyword arguments): given in ``options=`` they would be silently overridden.
MEASURE_ARGUMENTS = ("k", "eigen_k", "eigen_restarts", "spectral_samples", "seed", "loops", "dtype", "label",
                     "input_index", "mode", "diagnostics")


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
        state_norm: ``loops + 1`` RMS per-token norms of the states (tokens as `token_rows` reads them: the last
            axis is the features; a state of one axis is one token, its norm).
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
        >>> round(row.results["final_norm"]["value"], 6)   # the fixed point (2, 2)
        2.828427
        >>> _ = jacobiscope.diagnostics.unregister_diagnostic("final_norm")

    Subclass it and override ``compute`` (required). It returns a `DiagnosticResult` dataclass named in
    ``result_type`` — which then gives the report its columns, DataFrame scalars, glossary, JSON form and figure,
    the way every built-in does — or plain JSON-able values (a number or str is then its own column).
    ``options`` declares the settings ``compute`` reads (``{"window": Option("count", 4, maximum=1000)}``), checked
    once before any loop runs; ``requires`` names the diagnostics whose results ``compute`` reads from
    ``context.results``; ``cost`` (block forwards, or operation counts) is what `describe` prices; ``default`` says
    whether `analyze` runs it when no subset is asked for. ``columns(result)`` and ``figure(rows, labels)`` may be
    overridden here too (they default to the result type's).
    """

    name: str = ""
    #: one line for `jacobiscope analyze --help` and the catalogue (default: the class docstring's first sentence)
    description: str = ""
    result_type: type | None = None  # a `DiagnosticResult` dataclass: results are stored typed, written as to_dict()
    requires: tuple = ()
    default: bool = True
    always: bool = False  # runs whatever subset is asked for (the regime verdict reads what the others found)
    #: the options ``compute`` reads from ``context.options``, by name (`Option`: kind, default, budget); `measure`
    #: checks them before any loop runs, and refuses an option no chosen diagnostic declares ("did you mean")
    options: dict = {}

    def cost(self, state_size: int, loops: int, options: dict):
        """What this diagnostic costs on one trajectory, for `describe`: a number of block forwards, or a dict of
        operation counts ``{"forward": n, "jvp": n, "vjp": n, "jvp_block": n}`` (``jvp_block``: ``k`` tangents
        pushed through one vmapped jvp), which `describe` prices with timed operations of the actual block."""
        return 0.0

    def check_budget(self, state_size: int, loops: int, options: dict) -> None:
        """Refuse (`ArgumentError` / `MemoryBudgetError`, naming the budget and the fix) work this diagnostic could
        not finish in reasonable time or memory; called by `measure` before any loop runs. Default: no budget."""
        return None

    def compute(self, context: MeasureContext):
        raise NotImplementedError(f"{type(self).__name__}.compute(context) must return the diagnostic's result.")

    # ------------------------------------------------------------------ how its results are shown
    #: its summary-table and DataFrame columns are in every report, measured or not (the six original built-ins)
    listed: bool = False
    #: the name of its figure in `Report.plot` and `Report.display` (default: its own name)
    figure_name: str | None = None
    #: draw its figure even when no row carries a result (the figure then says "no data")
    figure_always: bool = False
    #: what its figure shows, under the figure in the HTML report (default: its ``description``)
    figure_caption: str = ""
    #: DataFrame columns are ``<prefix><scalar>``; None: ``"<name>."`` (the built-ins keep their historic names)
    column_prefix: str | None = None

    def typed(self, value):
        """``value`` (a stored result) as this diagnostic's ``result_type`` when it declares one and the value fits;
        the value itself otherwise (a result that does not fit is reported by `LayerResult.type_problems`)."""
        from ._result import DiagnosticResult

        if value is None or self.result_type is None or isinstance(value, DiagnosticResult):
            return value
        try:
            return self.result_type.from_dict(value)
        except (TypeError, ValueError):
            return value

    def from_row(self, row):
        """This diagnostic's result on a report row (typed when it declares a ``result_type``), or None."""
        return self.typed(row.results.get(self.name))

    def columns(self, result) -> dict:
        """Summary-table cells of one row: ``{header: value}`` (numbers or short strings). Default: the result's
        own ``columns()``; a plain number or str result is its own column."""
        from ._result import DiagnosticResult

        if isinstance(result, DiagnosticResult):
            return dict(result.columns())
        return {self.name: result} if _is_scalar(result) and result is not None else {}

    def table_headers(self) -> tuple:
        """The headers it always shows (a listed diagnostic's, from its result type)."""
        return tuple(getattr(self.result_type, "headers", ())) if self.listed else ()

    def scalars(self, result) -> dict:
        """DataFrame columns of one row: the result's ``scalars()`` (a plain dict: its number/str entries; a plain
        number: itself), named ``<prefix><key>``."""
        from ._result import DiagnosticResult

        prefix = f"{self.name}." if self.column_prefix is None else self.column_prefix
        if isinstance(result, DiagnosticResult):
            values = result.scalars()
        elif isinstance(result, dict):
            values = {key: value for key, value in result.items() if _is_scalar(value)}
        elif _is_scalar(result) and result is not None:
            return {self.name: result}
        else:
            values = {}
        return {f"{prefix}{key}": value for key, value in values.items()}

    def scalar_columns(self) -> tuple:
        """The DataFrame columns it always has (a listed diagnostic's)."""
        prefix = f"{self.name}." if self.column_prefix is None else self.column_prefix
        names = getattr(self.result_type, "scalar_names", ()) if self.listed else ()
        return tuple(f"{prefix}{name}" for name in names)

    def glossary(self) -> dict:
        """``{header: (unit, meaning)}`` for its summary-table columns: the result type's own entries, else the
        first line of this class's docstring."""
        return dict(getattr(self.result_type, "glossary", {}) or {})

    def panel_count(self, entries) -> int:
        """How many Axes its figure takes for ``entries``: the result type's ``panels`` (None: one per row that
        carries a result)."""
        panels = getattr(self.result_type, "panels", 0)
        if panels is None:
            return max(1, sum(1 for entry in entries if entry.result is not None))
        return panels

    def draw(self, axes, entries) -> None:
        """Draw its figure on ``axes`` from ``entries`` (`FigureEntry`: row, result, label, color)."""
        if self.result_type is None or not getattr(self.result_type, "panels", 0) != 0:
            raise DiagnosticError(f"diagnostic {self.name!r} draws no figure on given Axes — its result type declares "
                                  "no panels/draw; call plot() without ax")
        self.result_type.draw(axes, entries)

    def entries(self, rows: list, labels: list, colors: list) -> list:
        """One `FigureEntry` per row: the row, its result (typed, or None), label and color."""
        from ._result import FigureEntry

        return [FigureEntry(row, self.from_row(row), label, color) for row, label, color in zip(rows, labels, colors)]

    def figure(self, rows: list, labels: list):
        """A figure over several rows, or None: by default the result type's ``draw`` on a new Agg figure."""
        if self.result_type is None or getattr(self.result_type, "panels", 0) == 0:
            return None
        from .._figures import labels_and_colors, new_figure

        entries = self.entries(rows, labels, labels_and_colors(rows)[1])
        figure, axes = _figure_with_axes(new_figure, self.panel_count(entries), self.result_type)
        self.draw(axes, entries)
        return figure

    def __repr__(self) -> str:
        return f"<Diagnostic {self.name!r}>"


def token_rows(states: torch.Tensor, predictions: int | None = None) -> torch.Tensor:
    """A trajectory ``[n, *state]`` read as ``[n, tokens, features]``: one convention for every diagnostic.

    Example::

        >>> import torch
        >>> from jacobiscope.diagnostics._base import token_rows
        >>> token_rows(torch.zeros(5, 1, 12, 16)).shape   # a model's own loop: [1, T, H] states, T = 12 tokens
        torch.Size([5, 12, 16])
        >>> token_rows(torch.zeros(5, 12, 16)).shape, token_rows(torch.zeros(5, 7)).shape
        (torch.Size([5, 12, 16]), torch.Size([5, 1, 7]))

    The last axis holds a token's features and every other axis of the state indexes tokens: ``[T, H]`` has ``T``
    tokens, ``[1, T, H]`` (the batch axis of one a model's own loop keeps in its state) the same ``T``, ``[B, T, H]``
    ``B * T``; a state of one axis (or none) is one token. Why not the state's first axis: on ``[1, T, H]`` that is
    the batch axis, and the 12 tokens of a sequence were read as one. ``predictions`` (how many outputs a readout
    gives per state) groups the tokens instead by the leading axes whose sizes multiply to it (a state
    ``[1, T, blocks, H]`` with ``T`` predictions: ``T`` tokens of ``blocks * H`` features); None when no leading
    axes do.
    """
    shape = tuple(states.shape[1:])
    count = 1
    for size in shape[:-1]:
        count *= size
    if predictions is not None and predictions != count:
        prefix = 1
        for size in shape:
            prefix *= size
            if prefix == predictions:
                return states.reshape(states.shape[0], predictions, -1)
        return None
    return states.reshape(states.shape[0], count, -1)


def finite_or_nan(value) -> float:
    value = float(value)
    return value if math.isfinite(value) else math.nan


def _is_scalar(value) -> bool:
    return value is None or isinstance(value, (int, float, str, bool))


def figure_axes_layout(count: int, result_type) -> tuple:
    """``(columns, lines, width, height)`` of a figure with ``count`` panels: one line for a fixed panel count, a
    grid of at most three columns for one panel per row."""
    import math

    if getattr(result_type, "panels", 0) is None:
        columns = min(3, count)
        lines = math.ceil(count / columns)
        return columns, lines, 4.6 * columns, 3.2 * lines
    size = getattr(result_type, "figure_size", None) or (5.0 * count, 4.2)
    return count, 1, size[0], size[1]


def _figure_with_axes(new_figure, count: int, result_type):
    columns, lines, width, height = figure_axes_layout(count, result_type)
    if count <= 12:
        figure = new_figure(width, height)
    else:
        # The constrained-layout solver costs as much as drawing once per panel: fixed margins for big grids.
        figure = new_figure(width, height, layout=None)
        figure.subplots_adjust(left=0.07, right=0.98, top=1 - 0.55 / height, bottom=0.45 / height, hspace=0.55,
                               wspace=0.3)
    return figure, list(figure.subplots(lines, columns, squeeze=False).flat)


# The registry lives in its own module; its names stay importable from here (old code and the built-ins use them).
from ._registry import (  # noqa: E402,F401
    _BUILTIN_NAMES, _REGISTRY, _register_builtin, check_options, get_diagnostic, list_diagnostics, register_diagnostic,
    resolve, unregister_diagnostic,
)
