"""`LayerResult`: one (input, layer) measurement — the row's identity, its trajectory, and every diagnostic's typed
result in ``results``. The fields of the first format (``row.lyapunov``, ``row.regime``, ``row.extra``, ...) are a
thin view over ``results``, so code written against them keeps working."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from .._values import _is_number, _last, _nulls_to_nan, _plain, _plain_or_raw, _same, _shorten
from ._legacy import LEGACY_DIAGNOSTICS, LEGACY_FIELDS, OLD_ORDER, legacy_view, results_from_legacy
from ._result import DiagnosticResult, bad, is_int, numbers

MODES = ("block", "attention", "loop")

#: The fields of a row in the current format, in order (``results`` holds every diagnostic's result by name).
NEW_ORDER = ("input_index", "input_label", "layer", "mode", "eta", "loops", "state_shape", "state_norm", "step_size",
             "results", "flags", "seconds", "dtype", "outcome", "timings")
_IDENTITY = NEW_ORDER[:9]
_DEFAULTS = {"results": None, "flags": None, "seconds": 0.0, "dtype": None, "outcome": None, "timings": None}

#: The row's own DataFrame columns, before and after the diagnostics' columns.
ROW_COLUMNS = ("input_index", "input_label", "layer", "mode", "eta", "loops", "state_shape", "dtype",
               "final_state_norm", "final_step_size")
TAIL_COLUMNS = ("solved", "flags", "n_flags", "seconds")


def _registry():
    from ._base import _REGISTRY, list_diagnostics

    list_diagnostics()  # the built-ins register on first use
    return _REGISTRY


def typed_result(name: str, value):
    """``value`` typed by the registered diagnostic ``name`` (its ``result_type``), else as stored."""
    diagnostic = _registry().get(name)
    return value if diagnostic is None else diagnostic.typed(value)


@dataclass(init=False, eq=False, repr=False)
class LayerResult:
    """One (input, layer) measurement of a looped map: ``loops`` applications of the same map.

    Example::

        >>> import torch, jacobiscope
        >>> row = jacobiscope.measure(lambda x: 0.5 * x, torch.ones(3, dtype=torch.float64), loops=8,
        ...                           diagnostics=["lyapunov"])
        >>> sorted(row.results), round(row.results["lyapunov"].max, 4)
        (['lyapunov', 'regime'], -0.6931)
        >>> round(row.lyapunov["exponents"][0], 4), row.regime      # the first format's fields still read
        (-0.6931, 'converging')

    Attributes:
        input_index, input_label: which input (position in the batch given to ``analyze``, and a readable name).
        layer, mode, eta: which block, how it is looped (``"block"``, ``"attention"`` or ``"loop"``: the model's own
            recurrence) and the step size of an attention-mode update (None when the block is used as-is).
        loops, state_shape, dtype: how many times the map was applied, one trajectory's state shape, compute dtype.
        state_norm: ``loops + 1`` RMS per-token norms of ``X_t``; step_size: ``loops`` values
            ``||X_{t+1} - X_t||_F / ||X_t||_F``.
        results: every diagnostic's result by name, typed (`DiagnosticResult`) when its diagnostic is registered
            and declares a type, plain JSON-able values otherwise.
        flags: problems met on this row, e.g. ``"NaN/Inf at loop 17"``; seconds: wall-clock time of the row.
        outcome: what the model made of this input, when it says (``{"solved": True}``); timings: seconds per
            diagnostic.

    The first format's fields read (and write) through ``results``: ``spectral_norm`` (the samples list),
    ``eigenvalues`` / ``eigen_loop`` / ``oscillation``, ``lyapunov`` / ``clusters`` (plain dicts), ``energy``,
    ``regime`` / ``evidence``, and ``extra`` (the results of every other diagnostic, plain). The constructor takes
    both forms: ``LayerResult(..., results={...})`` and the first format's 20 fields.
    """

    input_index: int
    input_label: str
    layer: int
    mode: str
    eta: float | None
    loops: int
    state_shape: list
    state_norm: list
    step_size: list
    results: dict
    flags: list
    seconds: float
    dtype: str | None
    outcome: dict | None
    timings: dict | None

    __hash__ = None  # mutable, compared by value

    def __init__(self, *args, **kwargs):
        legacy = len(args) > len(NEW_ORDER) or any(key in kwargs for key in LEGACY_FIELDS + ("extra",))
        order = OLD_ORDER if legacy else NEW_ORDER
        if len(args) > len(order):
            raise TypeError(f"LayerResult takes at most {len(order)} positional arguments, got {len(args)}")
        values = dict(zip(order, args))
        twice = sorted(set(values) & set(kwargs))
        if twice:
            raise TypeError(f"LayerResult got multiple values for {', '.join(twice)}")
        values.update(kwargs)
        unknown = [key for key in values if key not in order]
        if unknown:
            raise TypeError(f"LayerResult got unexpected field(s) {', '.join(map(repr, unknown))}; fields: "
                            f"{', '.join(order)}")
        if legacy:
            values["results"] = results_from_legacy(values)
        missing = [name for name in order if name not in values and name not in _DEFAULTS
                   and name not in LEGACY_FIELDS + ("extra",)]
        if missing:
            raise TypeError(f"LayerResult is missing field(s) {', '.join(missing)}")
        for name in NEW_ORDER:
            setattr(self, name, values.get(name, _DEFAULTS.get(name)))
        if self.results is None:
            self.results = {}
        elif isinstance(self.results, dict):  # anything else is kept as given, for type_problems to name
            self.results = {name: typed_result(name, value) if isinstance(name, str) else value
                            for name, value in self.results.items()}
        if self.flags is None:
            self.flags = []

    # ------------------------------------------------------------------ conversion

    def to_dict(self) -> dict:
        """The row as plain Python values in the current format (field order kept); NaN and Inf stay floats.

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> import math
            >>> row = LayerResult(0, "x", 0, "block", None, 1, [2], [1.0, math.nan], [0.5])
            >>> row.to_dict()["state_norm"], row.to_dict()["results"]
            ([1.0, nan], {})

        Raises TypeError naming the offending field when a value cannot be held by JSON.
        """
        out = {}
        for name in NEW_ORDER:
            value = getattr(self, name)
            if name == "results" and isinstance(value, dict):
                value = {key: _result_dict(item, f"LayerResult.results[{key!r}]") for key, item in value.items()}
            out[name] = _plain(value, f"LayerResult.{name}")
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "LayerResult":
        """Build a row from `to_dict` output (either format: a row of the first format is upgraded).

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> LayerResult.from_dict({"layer": 0})
            Traceback (most recent call last):
            ...
            ValueError: LayerResult.from_dict: missing field(s) input_index, input_label, mode, eta, ...

        Unknown keys are an error too (a file from a newer jacobiscope: upgrade to read it).
        """
        from ._legacy import upgrade_row

        if not isinstance(data, dict):
            raise TypeError(f"LayerResult.from_dict expected a dict, got {type(data).__name__}")
        data = upgrade_row(data)
        missing = [name for name in NEW_ORDER if name not in data and name not in _DEFAULTS]
        if missing:
            raise ValueError(f"LayerResult.from_dict: missing field(s) {', '.join(missing)}; a row needs all of "
                             f"{', '.join(n for n in NEW_ORDER if n not in _DEFAULTS)} (eta may be null)")
        unknown = [key for key in data if key not in NEW_ORDER]
        if unknown:
            raise ValueError(f"LayerResult.from_dict: unknown field(s) {', '.join(map(repr, unknown))}; expected "
                             f"exactly {', '.join(NEW_ORDER)}. A file written by a newer jacobiscope needs that "
                             "version to read it.")
        values = dict(data)
        if values.get("seconds", 0.0) is None:
            values["seconds"] = math.nan
        for name in ("state_norm", "step_size"):  # null where the row promises floats reads as NaN
            if isinstance(values.get(name), list):
                values[name] = _nulls_to_nan(values[name])
        return cls(**values)

    # ------------------------------------------------------------------ derived numbers

    def scalars(self) -> dict:
        """One flat dict of scalars (the `to_dataframe` columns); None where not measured.

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> row = LayerResult(0, "x", 2, "block", None, 2, [4, 8], [1.0, 1.5, 2.0], [0.5, 0.3],
            ...                   results={"spectral_norm": {"samples": [{"loop": 0, "value": 1.2, "tolerance": 0},
            ...                                                          {"loop": 2, "value": 0.8, "tolerance": 0}]}})
            >>> s = row.scalars()
            >>> s["final_state_norm"], s["max_spectral_norm"], s["max_spectral_norm_loop"], s["lambda_max"]
            (2.0, 1.2, 0, None)

        The row's own columns, then each diagnostic's (the six listed built-ins always, in their historic names;
        any other where the row carries its result, as ``<name>.<scalar>``), then solved, flags, n_flags, seconds.
        Maxima skip NaN (a flagged row says so in ``flags``); they are NaN only when every value is.
        """
        out = {
            "input_index": self.input_index, "input_label": self.input_label, "layer": self.layer,
            "mode": self.mode, "eta": self.eta, "loops": self.loops,
            "state_shape": "x".join(str(n) for n in self.state_shape) if isinstance(self.state_shape, list) else "",
            "dtype": self.dtype, "final_state_norm": _last(self.state_norm), "final_step_size": _last(self.step_size),
        }
        registry = _registry()
        for diagnostic in _listed_first(registry):
            out.update(dict.fromkeys(diagnostic.scalar_columns()))
            result = self.results.get(diagnostic.name)
            if result is not None:
                out.update(_safe_scalars(diagnostic, result))
        for name, result in self.results.items():
            if name not in registry and result is not None:
                out.update({name: result} if _is_number(result) or isinstance(result, str) else {})
        out.update({"solved": self.outcome.get("solved") if isinstance(self.outcome, dict) else None,
                    "flags": "; ".join(str(flag) for flag in self.flags), "n_flags": len(self.flags),
                    "seconds": self.seconds})
        return out

    def diagnostic(self, name: str):
        """The result of the diagnostic ``name`` on this row (typed when its diagnostic is registered and declares
        a ``result_type``), or None when it was not measured."""
        value = self.results.get(name) if isinstance(self.results, dict) else None
        return typed_result(name, value)

    # ------------------------------------------------------------------ checks

    def type_problems(self) -> list[str]:
        """Fields whose value has the wrong type (or, for ``mode`` / ``regime``, is not in the vocabulary), as
        sentences; empty when every field has its type. `validate` checks the relations between fields too.

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> row = LayerResult(0, "x", "3", "block", None, "two", [2], [1.0], [])
            >>> row.type_problems()
            ["layer is '3' (str), expected an int", "loops is 'two' (str), expected an int >= 0"]
        """
        problems = _identity_problems(self)
        if not isinstance(self.results, dict):
            return problems + [bad("results", self.results, "an object of diagnostic results by name")]
        for name, result in self.results.items():
            problems += _result_problems(name, result)
        for name in ("outcome", "timings"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dict):
                problems.append(bad(name, value, "an object or null"))
        if isinstance(self.timings, dict):
            problems += [bad(f"timings[{key!r}]", value, "a number of seconds") for key, value in self.timings.items()
                         if not _is_number(value)]
        return problems

    def validate(self) -> list[str]:
        """Problems with this row against the contract, as sentences (empty when it is well formed).

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> row = LayerResult(0, "x", 0, "mlp", None, 2, [2], [1.0, 1.0], [0.5, 0.5])
            >>> for problem in row.validate(): print(problem)
            mode is 'mlp', expected one of 'block', 'attention', 'loop'
            state_norm has 2 values, expected loops + 1 = 3 (t = 0..loops)
        """
        from ..dynamics.regime import Regime

        problems = []
        if self.mode not in MODES:
            problems.append(f"mode is {self.mode!r}, expected one of {', '.join(map(repr, MODES))}")
        regimes = tuple(regime.value for regime in Regime)
        if "regime" in self.results and self.regime not in regimes:
            problems.append(f"regime is {self.regime!r}, expected one of {', '.join(map(repr, regimes))}")
        try:  # judge the plain values (tensors, NumPy numbers and tuples are fine in memory)
            plain = type(self).from_dict(self.to_dict())
        except (TypeError, ValueError):
            plain = self
        wrong_types = [p for p in plain.type_problems() if not p.startswith(("mode is", "regime is"))]
        if wrong_types:  # the relations below need the right types
            return problems + wrong_types
        if len(self.state_norm) != self.loops + 1:
            problems.append(f"state_norm has {len(self.state_norm)} values, expected loops + 1 = {self.loops + 1} "
                            "(t = 0..loops)")
        if len(self.step_size) != self.loops:
            problems.append(f"step_size has {len(self.step_size)} values, expected loops = {self.loops}")
        for name, result in plain.results.items():
            if isinstance(result, DiagnosticResult):
                problems += result.relation_problems(name, self)
        if not all(isinstance(flag, str) for flag in self.flags):
            problems.append("flags must be a list of str")
        try:
            self.to_dict()
        except TypeError as error:
            problems.append(str(error))
        return problems

    def label(self, *, with_mode: bool = False, with_input: bool = True) -> str:
        """A short name for legends and headings: ``"layer 3, attention, input 0"``."""
        parts = [f"layer {self.layer}"]
        if with_mode:
            parts.append(self.mode)
        if with_input:
            parts.append(f"input {self.input_index}")
        return ", ".join(parts) + (" (flagged)" if self.flags else "")

    def __eq__(self, other):
        if not isinstance(other, LayerResult):
            return NotImplemented
        return _same(_plain_or_raw(self), _plain_or_raw(other))

    def __repr__(self) -> str:
        return (f"LayerResult(layer={self.layer!r}, mode={self.mode!r}, input={self.input_index!r} "
                f"{_shorten(str(self.input_label), 30)!r}, regime={self.regime!r}, loops={self.loops!r}, "
                f"flags={self.flags!r})")


# The first format's fields, as a view over ``results`` (read and write).
for _name in LEGACY_FIELDS + ("extra",):
    setattr(LayerResult, _name, legacy_view(_name))


def _result_dict(item, where: str):
    if not isinstance(item, DiagnosticResult):
        return item
    if type(item).to_dict is DiagnosticResult.to_dict:
        return item.to_dict(where)
    return item.to_dict()  # a user's own to_dict


def _listed_first(registry) -> list:
    """Listed diagnostics (their columns in every report) first, then the others, each in registry order."""
    diagnostics = list(registry.values())
    return [d for d in diagnostics if d.listed] + [d for d in diagnostics if not d.listed]


def _safe_scalars(diagnostic, result) -> dict:
    try:
        return diagnostic.scalars(result)
    except Exception as error:  # noqa: BLE001 - a user's scalars must not break the table, but it says so
        return {diagnostic.name: f"? ({type(error).__name__} in {type(diagnostic).__name__}.scalars)"}


def _identity_problems(row) -> list[str]:
    problems = []
    for name in ("input_index", "layer"):
        if not is_int(getattr(row, name)):
            problems.append(bad(name, getattr(row, name), "an int"))
    if not isinstance(row.input_label, str):
        problems.append(bad("input_label", row.input_label, "a str"))
    if not isinstance(row.mode, str) or row.mode not in MODES:
        problems.append(bad("mode", row.mode, f"one of {', '.join(map(repr, MODES))}"))
    if row.eta is not None and not _is_number(row.eta):
        problems.append(bad("eta", row.eta, "a number or null"))
    if not is_int(row.loops) or row.loops < 0:
        problems.append(bad("loops", row.loops, "an int >= 0"))
    if not isinstance(row.state_shape, list) or not all(is_int(n) and n >= 0 for n in row.state_shape):
        problems.append(bad("state_shape", row.state_shape, "a list of ints such as [tokens, hidden]"))
    for name in ("state_norm", "step_size"):
        if not numbers(getattr(row, name)):
            problems.append(bad(name, getattr(row, name), "a list of numbers"))
    if not isinstance(row.flags, list) or not all(isinstance(flag, str) for flag in row.flags):
        problems.append(bad("flags", row.flags, "a list of str"))
    if not _is_number(row.seconds):
        problems.append(bad("seconds", row.seconds, "a number"))
    if row.dtype is not None and not isinstance(row.dtype, str):
        problems.append(bad("dtype", row.dtype, "a str such as 'float32' or null"))
    return problems


def _result_problems(name, result) -> list[str]:
    """A stored result's type problems: its own checks when typed; for a registered diagnostic's result that did
    not fit its type, why."""
    if not isinstance(name, str):
        return [bad("results key", name, "a diagnostic name (str)")]
    if isinstance(result, DiagnosticResult):
        return result.problems(name)
    diagnostic = _registry().get(name)
    if result is None or diagnostic is None or diagnostic.result_type is None:
        return []
    try:
        diagnostic.result_type.from_dict(result)
    except (TypeError, ValueError) as error:
        return [f"results[{name!r}]: {error}"]
    return []


LEGACY = LEGACY_DIAGNOSTICS
