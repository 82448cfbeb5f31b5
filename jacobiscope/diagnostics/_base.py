"""What a diagnostic is, and the one registry that `measure`, `analyze`, `describe` and the report all read.

Each diagnostic declares the options it reads (``options = {"basin_starts": Option("count", 8, maximum=4096)}``):
one table, checked once by `check_options` before any loop runs, for built-in and user diagnostics alike.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch

from .._validation import did_you_mean as _did_you_mean
from ..errors import ArgumentError, JacobiscopeError

__all__ = ["Diagnostic", "DiagnosticError", "MeasureContext", "Option", "register_diagnostic",
           "unregister_diagnostic", "list_diagnostics", "get_diagnostic", "check_options"]


class DiagnosticError(JacobiscopeError, RuntimeError):
    """A diagnostic (usually a user's own) misbehaved: its ``compute`` raised, returned something a report cannot
    hold, modified the trajectory, or its figure failed. The message names the diagnostic and what it did; an error
    it raised itself is chained as ``__cause__``."""


class DiagnosticDefinitionError(DiagnosticError, TypeError):
    """A diagnostic's class is unusable as declared (no ``compute``, ``requires`` that name itself or nothing
    registered, options declared with an unknown kind, ...): refused at `register_diagnostic`."""


# The kinds an option may have: (what a value must be, an example of a good one).
_KINDS = {
    "count": ("an int >= 1", "8"),
    "index": ("an int >= 0", "4"),
    "tolerance": ("a finite number >= 0", "1e-2"),
    "positive": ("a finite number > 0", "0.1"),
    "probability": ("a number in [0, 1]", "0.5"),
    "thresholds": ("a non-empty list of finite numbers > 0", "[1e-2, 1e-3]"),
    "seed": ("an int", "0"),
    "flag": ("a bool", "True"),
}


@dataclass(frozen=True)
class Option:
    """One option a diagnostic reads from ``context.options``: its kind, default and budget.

    Example::

        >>> from jacobiscope.diagnostics import Option
        >>> Option("count", 8, maximum=64).check(16, "basin_starts", "fixed_points")
        16
        >>> Option("count", 8, maximum=64).check(True, "basin_starts", "fixed_points")
        Traceback (most recent call last):
        ...
        jacobiscope.errors.ArgumentError: fixed_points option basin_starts must be an int >= 1, got True (bool) — pass e.g. basin_starts=8.

    Kinds: ``count`` (int >= 1), ``index`` (int >= 0), ``tolerance`` (finite >= 0), ``positive`` (finite > 0),
    ``probability`` (in [0, 1]), ``thresholds`` (a non-empty list of finite numbers > 0), ``seed`` (an int), ``flag``
    (a bool). A bool is never a number here. ``maximum`` is the budget of a count (or of a list's length): a larger
    value is refused before any work, naming the budget.
    """

    kind: str
    default: object = None
    maximum: float | None = None
    doc: str = ""

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ArgumentError(f"Option kind {self.kind!r} is unknown — use one of {', '.join(_KINDS)}")

    def check(self, value, name: str, owner: str):
        """``value`` converted to its plain type, or `ArgumentError` naming the option, its owner and the fix."""
        expected, example = _KINDS[self.kind]
        where = f"{owner} option {name}" if owner else name

        def refuse(extra=""):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise ArgumentError(f"{where} must be {expected}{extra}, got {shown} ({type(value).__name__}) — pass "
                                f"e.g. {name}={example}.")

        if self.kind == "flag":
            if not isinstance(value, bool):
                refuse()
            return value
        if self.kind == "thresholds":
            if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
                refuse()
            items = list(value.tolist() if hasattr(value, "tolist") else value)
            if not items or not all(_is_real(item) and math.isfinite(item) and item > 0 for item in items):
                refuse()
            if self.maximum is not None and len(items) > self.maximum:
                raise ArgumentError(f"{where} has {len(items)} entries, over the budget of {int(self.maximum)} — "
                                    f"pass at most {int(self.maximum)} (e.g. {name}={example}).")
            return [float(item) for item in items]
        if self.kind in ("count", "index", "seed"):
            if isinstance(value, bool):
                refuse()
            try:
                number = operator.index(value)  # numpy ints too; 2.0 or "8" are mistakes worth naming
            except TypeError:
                refuse()
            if (self.kind == "count" and number < 1) or (self.kind == "index" and number < 0):
                refuse()
            if self.maximum is not None and number > self.maximum:
                raise ArgumentError(f"{where}={number} is over the budget of {int(self.maximum):,} (the work grows "
                                    f"with it) — pass at most {name}={int(self.maximum)}.")
            return int(number)
        if not _is_real(value) or not math.isfinite(float(value)):
            refuse()
        value = float(value)
        if (self.kind == "tolerance" and value < 0) or (self.kind == "positive" and value <= 0) or (
                self.kind == "probability" and not 0 <= value <= 1):
            refuse()
        if self.maximum is not None and value > self.maximum:
            raise ArgumentError(f"{where}={value!r} is over the limit of {self.maximum!r} — pass at most "
                                f"{name}={self.maximum!r}.")
        return float(value)


def _is_real(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, torch.Tensor):  # a one-number tensor of a real dtype (not a bool, not complex)
        return value.numel() == 1 and value.dim() == 0 and not value.is_complex() and value.dtype != torch.bool
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf" and (
        getattr(value, "ndim", 0) == 0)


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
    ``columns`` (summary-table cells) and ``figure`` (a matplotlib figure over several rows). ``options`` declares
    the settings ``compute`` reads (``{"window": Option("count", 4, maximum=1000)}``). ``requires`` names the
    diagnostics whose results ``compute`` reads from ``context.results``; ``default`` says whether `analyze` runs it
    when no subset is asked for. Results must be JSON-able (dicts, lists, numbers, strings): they travel in reports.
    """

    name: str = ""
    result_type: type | None = None  # a `DiagnosticResult` dataclass: results are stored as its to_dict()
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


_REGISTRY: dict[str, Diagnostic] = {}
_BUILTIN_NAMES: set = set()


def _check_definition(diagnostic: Diagnostic) -> None:
    """Everything about a diagnostic that can be known before it runs (the `register_diagnostic` checks)."""
    name = diagnostic.name
    kind = type(diagnostic).__name__
    if type(diagnostic).compute is Diagnostic.compute:
        raise DiagnosticDefinitionError(f"diagnostic {name!r} ({kind}) does not define compute — override "
                                        "compute(self, context) to return its result")
    for attribute in ("default", "always"):
        if not isinstance(getattr(diagnostic, attribute), bool):
            raise DiagnosticDefinitionError(f"diagnostic {name!r}: {attribute} must be True or False, got "
                                            f"{getattr(diagnostic, attribute)!r} — set {attribute} = True/False")
    requires = diagnostic.requires
    if isinstance(requires, str) or not isinstance(requires, (tuple, list)) or not all(
            isinstance(req, str) for req in requires):
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: requires must be a tuple of diagnostic names, got "
                                        f"{requires!r} — write requires = ({requires!r},)" if isinstance(requires, str)
                                        else f"diagnostic {name!r}: requires must be a tuple of diagnostic names, got "
                                        f"{requires!r} — write e.g. requires = ('lyapunov',)")
    if name in requires:
        raise DiagnosticDefinitionError(f"diagnostic {name!r} requires itself — remove {name!r} from its requires "
                                        "(a diagnostic reads only the results of others)")
    unknown = [req for req in requires if req not in _REGISTRY]
    if unknown:
        raise DiagnosticDefinitionError(f"diagnostic {name!r} requires {unknown}, which are not registered — "
                                        f"register them first{_did_you_mean(unknown[0], _REGISTRY)}")
    if _cycle(name, requires):
        raise DiagnosticDefinitionError(f"diagnostic {name!r} requires {list(requires)}, which (through their own "
                                        f"requires) need {name!r} back — break the cycle")
    result_type = diagnostic.result_type
    from ._result import DiagnosticResult

    if result_type is not None and not (isinstance(result_type, type) and issubclass(result_type, DiagnosticResult)):
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: result_type must be a DiagnosticResult dataclass or "
                                        f"None, got {result_type!r} — subclass jacobiscope.DiagnosticResult")
    options = diagnostic.options
    if not isinstance(options, dict) or not all(isinstance(key, str) and isinstance(spec, Option)
                                                 for key, spec in options.items()):
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: options must be a dict of name -> "
                                        f"jacobiscope.diagnostics.Option, got {options!r} — declare e.g. "
                                        "options = {'window': Option('count', 4)}")
    _check_cost(diagnostic)
    for key, spec in options.items():
        for other in _REGISTRY.values():
            theirs = other.options.get(key)
            if other.name != name and theirs is not None and theirs.kind != spec.kind:
                raise DiagnosticDefinitionError(f"diagnostic {name!r} declares option {key!r} as {spec.kind}, but "
                                                f"{other.name!r} declares it as {theirs.kind} — rename the option")


_COST_KEYS = ("forward", "jvp", "vjp", "jvp_block")


def _check_cost(diagnostic: Diagnostic) -> None:
    """``cost`` on a small state with the declared defaults: what `describe` will price (run once here, so a cost
    that raises or returns junk is named now, not as a traceback from deep inside `describe`)."""
    name = diagnostic.name
    defaults = {"k": 4, "eigen_k": 4, "eigen_restarts": 4, "spectral_samples": 3, "seed": 0}
    defaults.update({key: spec.default for key, spec in diagnostic.options.items() if spec.default is not None})
    try:
        cost = diagnostic.cost(64, 8, defaults)
    except Exception as error:
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: cost(state_size=64, loops=8, options) raised "
                                        f"{type(error).__name__}: {error} — make cost return a number of block "
                                        "forwards (or a dict of operation counts) for any state size and loops"
                                        ) from error
    counts = cost if isinstance(cost, dict) else {"forward": cost}
    bad = {key: value for key, value in counts.items()
           if key not in _COST_KEYS or not _is_real(value) or not math.isfinite(value) or value < 0}
    if bad:
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: cost returned {cost!r} — return a finite number >= 0 "
                                        f"of block forwards, or a dict with keys among {', '.join(_COST_KEYS)} and "
                                        "finite counts >= 0")


def _cycle(name: str, requires) -> bool:
    seen, todo = set(), list(requires)
    while todo:
        current = todo.pop()
        if current == name:
            return True
        if current in seen or current not in _REGISTRY:
            continue
        seen.add(current)
        todo.extend(_REGISTRY[current].requires)
    return False


def register_diagnostic(diagnostic: Diagnostic, *, replace: bool = False) -> Diagnostic:
    """Add ``diagnostic`` to the registry that `measure`, `analyze`, `describe` and reports read; return it.

    Registering a name twice is an error unless ``replace=True`` (built-ins can be replaced that way too, never by
    accident: they are registered before any user registration, in every process). Everything that can be known
    before the diagnostic runs is checked here (`DiagnosticDefinitionError`): ``compute`` defined, ``requires``
    naming registered diagnostics (not itself, no cycle), ``options`` declared as `Option`.
    """
    if not isinstance(diagnostic, Diagnostic):
        hint = " (pass an instance: Diagnostic subclass called with ())" if isinstance(diagnostic, type) else ""
        raise DiagnosticDefinitionError(f"register_diagnostic takes a jacobiscope.Diagnostic instance, got "
                                        f"{type(diagnostic).__name__}{hint} — subclass jacobiscope.Diagnostic and "
                                        "pass an instance")
    if not isinstance(replace, bool):
        raise ArgumentError(f"replace must be True or False, got {replace!r} — pass replace=True to replace")
    list_diagnostics()  # the built-ins first: a user's "lyapunov" must clash with them, not be overwritten later
    name = diagnostic.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"a diagnostic's name must be an identifier, got {name!r} — set the class attribute name")
    if name in _REGISTRY and not replace:
        builtin = " built-in" if name in _BUILTIN_NAMES else ""
        raise ArgumentError(f"a{builtin} diagnostic named {name!r} is already registered — choose another name, or "
                            "pass replace=True to replace it")
    _check_definition(diagnostic)
    _REGISTRY[name] = diagnostic
    return diagnostic


def _register_builtin(diagnostic: Diagnostic) -> None:
    """The built-ins' own registration (by `_builtin`, on first use of the registry)."""
    _REGISTRY[diagnostic.name] = diagnostic
    _BUILTIN_NAMES.add(diagnostic.name)


def unregister_diagnostic(name: str) -> Diagnostic:
    """Remove the diagnostic ``name`` from the registry (and return it); its results in old reports still load."""
    list_diagnostics()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ArgumentError(f"no diagnostic named {name!r} is registered{_did_you_mean(name, _REGISTRY)} — "
                            f"registered: {', '.join(_REGISTRY)}")
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
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ArgumentError(f"unknown diagnostic {name!r}{_did_you_mean(name, names)} — choose from "
                            f"{', '.join(names)}")
    return _REGISTRY[name]


def resolve(diagnostics) -> list[Diagnostic]:
    """The diagnostics to run for a ``diagnostics=`` argument (None: every default one), with what they require,
    in registry order."""
    names = list_diagnostics()
    if diagnostics is None:
        wanted = [n for n in names if _REGISTRY[n].default]
    else:
        wanted = [diagnostics] if isinstance(diagnostics, str) else list(diagnostics)
        unknown = [n for n in wanted if not isinstance(n, str) or n not in _REGISTRY]
        if unknown:
            hint = _did_you_mean(unknown[0], names)
            raise ArgumentError(f"Unknown diagnostics {sorted(map(str, unknown))}{hint}; choose from {names}.")
    chosen = set()

    def add(name, path=()):
        if name in chosen:
            return
        if name in path:  # a cycle made by replacing a diagnostic after its dependants were registered
            raise DiagnosticDefinitionError(f"diagnostics {list(path)} require each other in a cycle — re-register "
                                            f"{name!r} without the cycle")
        if name not in _REGISTRY:
            raise DiagnosticDefinitionError(f"{path[-1]!r} requires {name!r}, which is no longer registered — "
                                            f"register {name!r} again or unregister {path[-1]!r}")
        for requirement in _REGISTRY[name].requires:
            add(requirement, path + (name,))
        chosen.add(name)

    for name in wanted + [n for n in names if _REGISTRY[n].always]:
        add(name)
    return [_REGISTRY[n] for n in names if n in chosen]


def check_options(chosen: list, options: dict | None) -> dict:
    """The ``options=`` of `measure` checked against what the ``chosen`` diagnostics declare, before any loop runs:
    known keys only ("did you mean"), each value of its declared kind and within its budget. Returns the options
    converted to plain values (declared defaults are left to each diagnostic).

    Example::

        >>> from jacobiscope.diagnostics._base import check_options, resolve
        >>> check_options(resolve(["fixed_points"]), {"basin_starts": 16})
        {'basin_starts': 16}
        >>> check_options(resolve(["fixed_points"]), {"basin_start": 16})
        Traceback (most recent call last):
        ...
        jacobiscope.errors.ArgumentError: unknown option 'basin_start' (did you mean 'basin_starts'?) — options of the chosen diagnostics: basin_noise, basin_rtol, basin_starts.
    """
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ArgumentError(f"options must be a dict of diagnostic settings, got {type(options).__name__} — pass e.g. "
                            "options={'basin_starts': 16}.")
    declared = {}
    for diagnostic in chosen:
        for key, spec in diagnostic.options.items():
            declared.setdefault(key, (spec, diagnostic.name))
    everywhere = {key: other.name for other in _REGISTRY.values() for key in other.options}
    checked = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ArgumentError(f"options has the key {key!r} ({type(key).__name__}); option names are str — pass "
                                "e.g. options={'basin_starts': 16}.")
        if key in MEASURE_ARGUMENTS:
            raise ArgumentError(f"options[{key!r}] would be overridden by measure's own argument {key} — pass "
                                f"{key}=... to measure instead of in options.")
        if key not in declared:
            owner = everywhere.get(key)
            if owner is not None:
                raise ArgumentError(f"option {key!r} belongs to the diagnostic {owner!r}, which this call does not run "
                                    f"— add {owner!r} to diagnostics=, or drop the option.")
            known = sorted(declared) or ["(none: the chosen diagnostics take no options)"]
            raise ArgumentError(f"unknown option {key!r}{_did_you_mean(key, list(declared) + list(everywhere))} — "
                                f"options of the chosen diagnostics: {', '.join(known)}.")
        spec, owner = declared[key]
        checked[key] = spec.check(value, key, owner)
    return checked


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
