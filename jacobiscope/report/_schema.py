"""The report's schema: one `LayerResult` per (input, layer), its field contract and conversions."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..dynamics.regime import Regime
from ._values import _is_number, _last, _nulls_to_nan, _plain, _plain_or_raw, _same
from ._text import _shorten


MODES = ("block", "attention", "loop")


# Every verdict a row may carry: the classifier's and "unknown" (one vocabulary, `jacobiscope.dynamics.Regime`).
REGIMES = tuple(regime.value for regime in Regime)


FORMAT = "jacobiscope-report"


FORMAT_VERSION = 1


OSCILLATION_KEYS = (
    "spectral_radius",
    "complex_fraction",
    "max_imag",
    "max_rotation_angle",
    "mean_rotation_angle",
    "outside_unit_circle_fraction",
)


LYAPUNOV_KEYS = ("exponents", "stderr", "history", "kaplan_yorke")


CLUSTER_KEYS = ("top_eigenvalue", "effective_clusters", "cluster_count")


# Where the schema promises floats. In JSON a NaN there is written as a bare null (no "nonfinite" entry), and a
# null read there comes back as NaN. Keys of the optional dicts are float positions only when they are listed.
_FLOAT_LIST_FIELDS = ("state_norm", "step_size", "eigenvalues", "energy")


_FLOAT_SCALAR_FIELDS = ("seconds",)


_FLOAT_DICT_KEYS = {
    "oscillation": OSCILLATION_KEYS,
    "lyapunov": LYAPUNOV_KEYS,
    "clusters": CLUSTER_KEYS,
}


_SPECTRAL_NORM_FLOAT_KEYS = ("value", "tolerance")


# Fields beyond the original contract: they have defaults, and files without them still read.
_OPTIONAL_FIELDS = ("dtype", "outcome", "extra", "timings")


DATAFRAME_COLUMNS = (
    "input_index",
    "input_label",
    "layer",
    "mode",
    "eta",
    "loops",
    "state_shape",
    "dtype",
    "final_state_norm",
    "final_step_size",
    "max_spectral_norm",
    "max_spectral_norm_loop",
    "final_spectral_norm",
    "eigen_loop",
    *OSCILLATION_KEYS,
    "lambda_max",
    "lambda_max_stderr",
    "kaplan_yorke",
    "final_top_eigenvalue",
    "final_effective_clusters",
    "final_cluster_count",
    "final_energy",
    "regime",
    "solved",
    "flags",
    "n_flags",
    "seconds",
)


@dataclass(eq=False, repr=False)
class LayerResult:
    """One (input, layer) measurement of a looped block: ``loops`` applications of the same map.

    Example::

        >>> from jacobiscope.report import LayerResult
        >>> row = LayerResult.from_dict({"input_index": 0, "input_label": "x", "layer": 1, "mode": "attention",
        ...     "eta": 0.5, "loops": 1, "state_shape": [2, 4], "state_norm": [1.0, None], "step_size": [0.2],
        ...     "spectral_norm": [], "eigenvalues": None, "eigen_loop": None, "oscillation": None,
        ...     "lyapunov": None, "clusters": None, "energy": None, "regime": "unknown", "evidence": {},
        ...     "flags": ["NaN/Inf at loop 1"], "seconds": 0.01})
        >>> row
        LayerResult(layer=1, mode='attention', input=0 'x', regime='unknown', loops=1, flags=['NaN/Inf at loop 1'])
        >>> row.state_norm  # null where a float is expected reads as NaN
        [1.0, nan]

    Attributes:
        input_index: position of the input in the batch given to ``analyze``.
        input_label: a human-readable name for it (a text snippet, ``"pixel_values[0]"``).
        layer: index of the looped block.
        mode: ``"block"`` (the whole block is the map) or ``"attention"`` (the attention sub-map).
        eta: step size of the looped update, or None when the block is used as-is.
        loops: how many times the map was applied.
        state_shape: the shape of one trajectory's state, e.g. ``[tokens, hidden]``.
        state_norm: ``loops + 1`` values, the RMS per-token norm of ``X_t`` for ``t = 0..loops``.
        step_size: ``loops`` values, ``||X_{t+1} - X_t||_F / ||X_t||_F``.
        spectral_norm: ``[{"loop": t, "value": sigma, "tolerance": tol}, ...]`` at the sampled loops.
        eigenvalues: the top-k Jacobian eigenvalues as ``[re, im]`` pairs at loop ``eigen_loop``, or None.
        eigen_loop: the loop at which ``eigenvalues`` were computed, or None.
        oscillation: `OscillationMeasures.as_dict` style floats (spectral_radius, complex_fraction, max_imag,
            max_rotation_angle, mean_rotation_angle, outside_unit_circle_fraction), or None.
        lyapunov: ``{"exponents": [k], "stderr": [k], "history": [[k] per loop], "kaplan_yorke": float}``,
            largest exponent first, or None.
        clusters: ``{"top_eigenvalue": [...], "effective_clusters": [...], "cluster_count": [...]}`` per loop
            ``t = 0..loops``, or None.
        energy: pseudo-energy per loop where the map has a drive, else None.
        regime: one of `REGIMES`.
        evidence: the numbers behind ``regime`` (free-form, JSON-able).
        flags: problems met on this row, e.g. ``"NaN/Inf at loop 17"``; empty when fine.
        seconds: wall-clock time spent on this row.
        dtype: the compute dtype of this row, e.g. ``"float32"`` (optional; None when not recorded).
        outcome: what the model made of this input at ``loops`` loops, when it says (a looped model's
            ``loop_outcome``): e.g. ``{"solved": True, "givens": 36}`` for a Sudoku solver; None otherwise.
        extra: the results of registered diagnostics other than the built-in ones, by name (JSON-able), or None.
        timings: seconds each diagnostic took on this row, by name (what `describe` estimates), or None.

    Values must be plain Python (or anything with ``tolist()``: tensors and NumPy values are converted by
    `to_dict`). Equality treats NaN as equal to NaN, so a flagged row equals its own JSON round trip.
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
    spectral_norm: list
    eigenvalues: list | None
    eigen_loop: int | None
    oscillation: dict | None
    lyapunov: dict | None
    clusters: dict | None
    energy: list | None
    regime: str
    evidence: dict
    flags: list
    seconds: float
    dtype: str | None = None
    outcome: dict | None = None
    extra: dict | None = None
    timings: dict | None = None

    __hash__ = None  # mutable, compared by value

    # ------------------------------------------------------------------ conversion

    def to_dict(self) -> dict:
        """The row as plain Python values (field order kept); NaN and Inf stay floats.

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> import math
            >>> row = LayerResult(0, "x", 0, "block", None, 1, [2], [1.0, math.nan], [0.5], [], None, None,
            ...                   None, None, None, None, "unknown", {}, [], 0.0)
            >>> row.to_dict()["state_norm"]
            [1.0, nan]

        Raises TypeError naming the offending field when a value cannot be held by JSON.
        """
        return {f.name: _plain(getattr(self, f.name), f"LayerResult.{f.name}") for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "LayerResult":
        """Build a row from `to_dict` output (or parsed JSON); null where a float is expected becomes NaN.

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> LayerResult.from_dict({"layer": 0})
            Traceback (most recent call last):
            ...
            ValueError: LayerResult.from_dict: missing field(s) input_index, input_label, mode, eta, ...

        Unknown keys are an error too (a file from a newer jacobiscope: upgrade to read it).
        """
        if not isinstance(data, dict):
            raise TypeError(f"LayerResult.from_dict expected a dict, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        missing = [name for name in names if name not in data and name not in _OPTIONAL_FIELDS]
        if missing:
            raise ValueError(
                f"LayerResult.from_dict: missing field(s) {', '.join(missing)}; a row needs all of "
                f"{', '.join(n for n in names if n not in _OPTIONAL_FIELDS)} (eta, eigenvalues, eigen_loop, "
                "oscillation, lyapunov, clusters and energy may be null)"
            )
        unknown = [key for key in data if key not in names]
        if unknown:
            raise ValueError(
                f"LayerResult.from_dict: unknown field(s) {', '.join(map(repr, unknown))}; expected exactly "
                f"{', '.join(names)}. A file written by a newer jacobiscope needs that version to read it."
            )
        values = {name: None for name in _OPTIONAL_FIELDS}
        values.update(data)
        for name in _FLOAT_LIST_FIELDS:
            if values[name] is not None:
                values[name] = _nulls_to_nan(values[name])
        for name in _FLOAT_SCALAR_FIELDS:
            if values[name] is None:
                values[name] = math.nan
        for name, keys in _FLOAT_DICT_KEYS.items():
            if isinstance(values[name], dict):
                values[name] = {k: (_nulls_to_nan(v) if k in keys else v) for k, v in values[name].items()}
        if isinstance(values["spectral_norm"], list):
            values["spectral_norm"] = [
                {k: (_nulls_to_nan(v) if k in _SPECTRAL_NORM_FLOAT_KEYS else v) for k, v in entry.items()}
                if isinstance(entry, dict) else entry
                for entry in values["spectral_norm"]
            ]
        return cls(**{name: values[name] for name in names})

    # ------------------------------------------------------------------ derived numbers

    def scalars(self) -> dict:
        """One flat dict of scalars (the `to_dataframe` columns, `DATAFRAME_COLUMNS`); None where not measured.

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> row = LayerResult(0, "x", 2, "block", None, 2, [4, 8], [1.0, 1.5, 2.0], [0.5, 0.3],
            ...                   [{"loop": 0, "value": 1.2, "tolerance": 1e-6},
            ...                    {"loop": 2, "value": 0.8, "tolerance": 1e-6}],
            ...                   None, None, None,
            ...                   {"exponents": [0.01], "stderr": [0.002], "history": [[0.02], [0.01]], "kaplan_yorke": 1.0},
            ...                   None, None, "critical", {}, [], 0.5)
            >>> s = row.scalars()
            >>> s["final_state_norm"], s["max_spectral_norm"], s["max_spectral_norm_loop"], s["lambda_max"]
            (2.0, 1.2, 0, 0.01)

        Maxima skip NaN (a flagged row says so in ``flags``); they are NaN only when every value is.
        """
        oscillation = self.oscillation if isinstance(self.oscillation, dict) else {}
        lyapunov = self.lyapunov if isinstance(self.lyapunov, dict) else {}
        clusters = self.clusters if isinstance(self.clusters, dict) else {}
        samples = [(e.get("loop"), e.get("value")) for e in self.spectral_norm if isinstance(e, dict)]
        samples = [(loop, value) for loop, value in samples if _is_number(value)]
        finite = [(loop, value) for loop, value in samples if not math.isnan(value)]
        if finite:
            max_loop, max_value = max(finite, key=lambda item: item[1])
        elif samples:
            max_loop, max_value = None, math.nan
        else:
            max_loop, max_value = None, None
        exponents = lyapunov.get("exponents") or []
        stderr = lyapunov.get("stderr") or []
        return {
            "input_index": self.input_index,
            "input_label": self.input_label,
            "layer": self.layer,
            "mode": self.mode,
            "eta": self.eta,
            "loops": self.loops,
            "state_shape": "x".join(str(n) for n in self.state_shape),
            "dtype": self.dtype,
            "final_state_norm": _last(self.state_norm),
            "final_step_size": _last(self.step_size),
            "max_spectral_norm": max_value,
            "max_spectral_norm_loop": max_loop,
            "final_spectral_norm": samples[-1][1] if samples else None,
            "eigen_loop": self.eigen_loop,
            **{key: oscillation.get(key) for key in OSCILLATION_KEYS},
            "lambda_max": exponents[0] if exponents else None,
            "lambda_max_stderr": stderr[0] if stderr else None,
            "kaplan_yorke": lyapunov.get("kaplan_yorke"),
            "final_top_eigenvalue": _last(clusters.get("top_eigenvalue")),
            "final_effective_clusters": _last(clusters.get("effective_clusters")),
            "final_cluster_count": _last(clusters.get("cluster_count")),
            "final_energy": _last(self.energy),
            "regime": self.regime,
            "solved": self.outcome.get("solved") if isinstance(self.outcome, dict) else None,
            "flags": "; ".join(str(flag) for flag in self.flags),
            "n_flags": len(self.flags),
            "seconds": self.seconds,
        }

    def type_problems(self) -> list[str]:
        """Fields whose value has the wrong type (or, for ``mode`` / ``regime``, is not in the vocabulary), as
        sentences; empty when every field has its type. `validate` checks the relations between fields too.

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> row = LayerResult(0, "x", "3", "block", None, "two", [2], [1.0], [], [], None, None,
            ...                   None, None, None, None, "unknown", {}, [], 0.0)
            >>> row.type_problems()
            ["layer is '3' (str), expected an int", "loops is 'two' (str), expected an int >= 0"]
        """
        problems = []

        def bad(name, value, expected):
            problems.append(f"{name} is {_shorten(repr(value), 40)} ({type(value).__name__}), expected {expected}")

        def is_int(value):
            return isinstance(value, int) and not isinstance(value, bool)

        def numbers(value):
            return isinstance(value, list) and all(_is_number(item) for item in value)

        for name in ("input_index", "layer"):
            if not is_int(getattr(self, name)):
                bad(name, getattr(self, name), "an int")
        if not isinstance(self.input_label, str):
            bad("input_label", self.input_label, "a str")
        if not isinstance(self.mode, str) or self.mode not in MODES:
            bad("mode", self.mode, f"one of {', '.join(map(repr, MODES))}")
        if self.eta is not None and not _is_number(self.eta):
            bad("eta", self.eta, "a number or null")
        if not is_int(self.loops) or self.loops < 0:
            bad("loops", self.loops, "an int >= 0")
        if not isinstance(self.state_shape, list) or not all(is_int(n) and n >= 0 for n in self.state_shape):
            bad("state_shape", self.state_shape, "a list of ints such as [tokens, hidden]")
        for name in ("state_norm", "step_size"):
            if not numbers(getattr(self, name)):
                bad(name, getattr(self, name), "a list of numbers")
        if not isinstance(self.spectral_norm, list):
            bad("spectral_norm", self.spectral_norm, "a list of {'loop', 'value', 'tolerance'} objects")
        else:
            for i, entry in enumerate(self.spectral_norm):
                if not isinstance(entry, dict) or not is_int(entry.get("loop")) or not _is_number(entry.get("value")) \
                        or not _is_number(entry.get("tolerance", 0.0)):
                    bad(f"spectral_norm[{i}]", entry, "{'loop': int, 'value': number, 'tolerance': number}")
        if self.eigenvalues is not None and (not isinstance(self.eigenvalues, list) or not all(
                isinstance(pair, list) and len(pair) == 2 and numbers(pair) for pair in self.eigenvalues)):
            bad("eigenvalues", self.eigenvalues, "null or a list of [re, im] number pairs")
        if self.eigen_loop is not None and not is_int(self.eigen_loop):
            bad("eigen_loop", self.eigen_loop, "an int or null")
        for name, keys in (("oscillation", OSCILLATION_KEYS), ("lyapunov", LYAPUNOV_KEYS), ("clusters", CLUSTER_KEYS)):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, dict):
                bad(name, value, "an object or null")
                continue
            for key in keys:
                if key not in value:
                    continue
                item = value[key]
                if name == "oscillation" or key == "kaplan_yorke":
                    ok = _is_number(item)
                elif key == "history":
                    ok = isinstance(item, list) and all(numbers(step) for step in item)
                else:
                    ok = numbers(item)
                if not ok:
                    bad(f"{name}[{key!r}]", item, "a number" if name == "oscillation" or key == "kaplan_yorke"
                        else "a list of lists of numbers" if key == "history" else "a list of numbers")
        if self.energy is not None and not numbers(self.energy):
            bad("energy", self.energy, "null or a list of numbers")
        if not isinstance(self.regime, str) or self.regime not in REGIMES:
            bad("regime", self.regime, f"one of {', '.join(map(repr, REGIMES))}")
        if not isinstance(self.evidence, dict):
            bad("evidence", self.evidence, "an object")
        if not isinstance(self.flags, list) or not all(isinstance(flag, str) for flag in self.flags):
            bad("flags", self.flags, "a list of str")
        if not _is_number(self.seconds):
            bad("seconds", self.seconds, "a number")
        if self.dtype is not None and not isinstance(self.dtype, str):
            bad("dtype", self.dtype, "a str such as 'float32' or null")
        for name in ("outcome", "extra", "timings"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dict):
                bad(name, value, "an object or null")
        if isinstance(self.timings, dict):
            for key, value in self.timings.items():
                if not _is_number(value):
                    bad(f"timings[{key!r}]", value, "a number of seconds")
        return problems

    def validate(self) -> list[str]:
        """Problems with this row against the contract, as sentences (empty when it is well formed).

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> row = LayerResult(0, "x", 0, "mlp", None, 2, [2], [1.0, 1.0], [0.5, 0.5], [], None, None,
            ...                   None, None, None, None, "stable", {}, [], 0.0)
            >>> for problem in row.validate(): print(problem)
            mode is 'mlp', expected one of 'block', 'attention', 'loop'
            regime is 'stable', expected one of 'converging', 'periodic', 'critical', 'chaotic', 'oscillating', 'diverging', 'undetermined', 'unknown'
            state_norm has 2 values, expected loops + 1 = 3 (t = 0..loops)
        """
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode is {self.mode!r}, expected one of {', '.join(map(repr, MODES))}")
        if self.regime not in REGIMES:
            problems.append(f"regime is {self.regime!r}, expected one of {', '.join(map(repr, REGIMES))}")
        try:  # judge the plain values (tensors, NumPy numbers and tuples are fine in memory)
            plain = type(self).from_dict(self.to_dict())
        except (TypeError, ValueError):
            plain = self
        wrong_types = [p for p in plain.type_problems() if not p.startswith(("mode is", "regime is"))]
        if wrong_types:  # the relations below need the right types
            return problems + wrong_types
        if len(self.state_norm) != self.loops + 1:
            problems.append(
                f"state_norm has {len(self.state_norm)} values, expected loops + 1 = {self.loops + 1} (t = 0..loops)"
            )
        if len(self.step_size) != self.loops:
            problems.append(f"step_size has {len(self.step_size)} values, expected loops = {self.loops}")
        for i, entry in enumerate(self.spectral_norm):
            if not isinstance(entry, dict) or not {"loop", "value", "tolerance"} <= set(entry):
                problems.append(
                    f"spectral_norm[{i}] is {entry!r}, expected {{'loop': t, 'value': v, 'tolerance': tol}}"
                )
            elif not isinstance(entry["loop"], int) or not 0 <= entry["loop"] <= self.loops:
                problems.append(
                    f"spectral_norm[{i}]['loop'] is {entry['loop']!r}, expected an int in 0..{self.loops}"
                )
        if (self.eigenvalues is None) != (self.eigen_loop is None):
            problems.append("eigenvalues and eigen_loop must both be set or both be None")
        if self.eigenvalues is not None and any(not isinstance(p, list) or len(p) != 2 for p in self.eigenvalues):
            problems.append("eigenvalues must be [re, im] pairs")
        if isinstance(self.oscillation, dict):
            missing = [key for key in OSCILLATION_KEYS if key not in self.oscillation]
            if missing:
                problems.append(f"oscillation lacks {', '.join(missing)}")
        elif self.oscillation is not None:
            problems.append(f"oscillation is a {type(self.oscillation).__name__}, expected a dict or None")
        if isinstance(self.lyapunov, dict):
            missing = [key for key in LYAPUNOV_KEYS if key not in self.lyapunov]
            if missing:
                problems.append(f"lyapunov lacks {', '.join(missing)}")
            else:
                k = len(self.lyapunov["exponents"])
                if len(self.lyapunov["stderr"]) != k:
                    problems.append(f"lyapunov stderr has {len(self.lyapunov['stderr'])} values, expected k = {k}")
                if any(len(step) != k for step in self.lyapunov["history"]):
                    problems.append(f"lyapunov history rows must each hold k = {k} values")
        elif self.lyapunov is not None:
            problems.append(f"lyapunov is a {type(self.lyapunov).__name__}, expected a dict or None")
        if isinstance(self.clusters, dict):
            for key in CLUSTER_KEYS:
                if key not in self.clusters:
                    problems.append(f"clusters lacks {key}")
                elif len(self.clusters[key]) > self.loops + 1:
                    # Fewer is fine: a row that went NaN/Inf stops at its last finite loop.
                    problems.append(
                        f"clusters[{key!r}] has {len(self.clusters[key])} values, "
                        f"expected at most loops + 1 = {self.loops + 1}"
                    )
        elif self.clusters is not None:
            problems.append(f"clusters is a {type(self.clusters).__name__}, expected a dict or None")
        if not isinstance(self.evidence, dict):
            problems.append(f"evidence is a {type(self.evidence).__name__}, expected a dict")
        if self.outcome is not None and not isinstance(self.outcome, dict):
            problems.append(f"outcome is a {type(self.outcome).__name__}, expected a dict or None")
        if self.extra is not None and not isinstance(self.extra, dict):
            problems.append(f"extra is a {type(self.extra).__name__}, expected a dict or None")
        if not isinstance(self.flags, list) or not all(isinstance(flag, str) for flag in self.flags):
            problems.append("flags must be a list of str")
        try:
            self.to_dict()
        except TypeError as error:
            problems.append(str(error))
        return problems

    def diagnostic(self, name: str):
        """The result of the diagnostic ``name`` on this row, typed (its ``result_type``: e.g. a `LyapunovResult`
        for ``"lyapunov"``) when the diagnostic is registered and declares one; the stored value otherwise; None when
        it was not measured."""
        from ..diagnostics._base import _REGISTRY, list_diagnostics

        list_diagnostics()
        diagnostic = _REGISTRY.get(name)
        if diagnostic is not None:
            return diagnostic.from_row(self)
        return (self.extra or {}).get(name)

    def label(self, *, with_mode: bool = False, with_input: bool = True) -> str:
        """A short name for legends and headings: ``"layer 3, attention, input 0"``."""
        parts = [f"layer {self.layer}"]
        if with_mode:
            parts.append(self.mode)
        if with_input:
            parts.append(f"input {self.input_index}")
        return ", ".join(parts) + (" (flagged)" if self.flags else "")

    # ------------------------------------------------------------------ dunder

    def __eq__(self, other):
        if not isinstance(other, LayerResult):
            return NotImplemented
        return _same(_plain_or_raw(self), _plain_or_raw(other))

    def __repr__(self) -> str:
        return (
            f"LayerResult(layer={self.layer!r}, mode={self.mode!r}, input={self.input_index!r} "
            f"{_shorten(self.input_label, 30)!r}, regime={self.regime!r}, loops={self.loops!r}, flags={self.flags!r})"
        )
