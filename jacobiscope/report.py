"""`Report`: what `jacobiscope.analyze` measured, as a terminal table, JSON, a DataFrame, figures or one HTML file.

Example::

    >>> from jacobiscope.report import LayerResult, Report
    >>> row = LayerResult(input_index=0, input_label="pixel_values[0]", layer=3, mode="block", eta=None, loops=2,
    ...     state_shape=[4, 8], state_norm=[1.0, 1.0, 1.0], step_size=[0.1, 0.01],
    ...     spectral_norm=[{"loop": 2, "value": 0.9, "tolerance": 1e-6}], eigenvalues=[[0.9, 0.0]], eigen_loop=2,
    ...     oscillation=None, lyapunov=None, clusters=None, energy=None, regime="converging", evidence={},
    ...     flags=[], seconds=0.1)
    >>> report = Report(rows=[row], provenance={"model": "demo"}, notes=[])
    >>> Report.from_json(report.to_json()) == report
    True
    >>> print(report.summary())
    layer  mode   input               state norm  max ||J||2  rho(J)  complex  lambda_max +/- se  eff. clusters  regime      flags
    ...
        3  block  0: pixel_values[0]           1         0.9       -        -                  -              -  converging  -
    ...

Every value is a plain Python number, string, list or dict, so a report survives `to_json` / `from_json`
exactly (NaN and Inf included, see `Report.to_json`). Plotting needs matplotlib and `to_dataframe` needs
pandas; both are imported only when called.
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path

from ._io import atomic_write_text
from .dynamics.regime import Regime

__all__ = ["LayerResult", "Report", "MODES", "REGIMES", "DATAFRAME_COLUMNS"]

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


# --------------------------------------------------------------------------------------------------- rows


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

    def validate(self) -> list[str]:
        """Problems with this row against the contract, as sentences (empty when it is well formed).

        Example::

            >>> from jacobiscope.report import LayerResult
            >>> row = LayerResult(0, "x", 0, "mlp", None, 2, [2], [1.0, 1.0], [0.5, 0.5], [], None, None,
            ...                   None, None, None, None, "stable", {}, [], 0.0)
            >>> for problem in row.validate(): print(problem)
            mode is 'mlp', expected one of 'block', 'attention', 'loop'
            regime is 'stable', expected one of 'converging', 'critical', 'chaotic', 'oscillating', 'diverging', 'unknown'
            state_norm has 2 values, expected loops + 1 = 3 (t = 0..loops)
        """
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode is {self.mode!r}, expected one of {', '.join(map(repr, MODES))}")
        if self.regime not in REGIMES:
            problems.append(f"regime is {self.regime!r}, expected one of {', '.join(map(repr, REGIMES))}")
        if not isinstance(self.loops, int) or self.loops < 0:
            problems.append(f"loops is {self.loops!r}, expected a non-negative int")
            return problems
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
        """The result of the diagnostic ``name`` on this row (a built-in's field, or ``extra[name]``), or None."""
        builtin = {"spectral_norm": self.spectral_norm, "lyapunov": self.lyapunov, "clusters": self.clusters,
                   "energy": self.energy, "regime": {"regime": self.regime, "evidence": self.evidence},
                   "eigenvalues": None if self.eigenvalues is None else
                   {"loop": self.eigen_loop, "values": self.eigenvalues, "oscillation": self.oscillation}}
        if name in builtin:
            return builtin[name]
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


# --------------------------------------------------------------------------------------------------- report


@dataclass(eq=False, repr=False)
class Report:
    """What ``jacobiscope.analyze`` returns: one `LayerResult` per (input, layer), with provenance and notes.

    Example::

        >>> import math
        >>> from jacobiscope.report import LayerResult, Report
        >>> row = LayerResult(0, "x", 5, "block", None, 1, [2], [1.0, math.inf], [math.nan], [], None, None,
        ...                   None, None, None, None, "diverging", {"growth": math.inf}, ["NaN/Inf at loop 1"], 0.0)
        >>> report = Report([row], {"model": "demo", "versions": {"torch": "2.13.0"}}, ["a note"])
        >>> report
        <Report: 1 row (1 input x 1 layer), 1 flagged, model='demo'>
        >>> Report.from_json(report.to_json()) == report  # NaN and Inf survive JSON
        True

    Attributes:
        rows: the measurements, in the order ``analyze`` made them.
        provenance: model, layers, mode, loops, dtype, device, seed, ``versions``: how to reproduce the numbers.
        notes: things the run changed or decided on the user's behalf (e.g. an attention backend switch).

    Dict rows are turned into `LayerResult` (`LayerResult.from_dict`). ``str(report)`` is `summary`; in
    Jupyter the summary shows as an HTML table.
    """

    rows: list
    provenance: dict
    notes: list

    __hash__ = None

    def __post_init__(self):
        if isinstance(self.rows, (LayerResult, dict)) or not isinstance(self.rows, (list, tuple)):
            raise TypeError(f"Report.rows must be a list of LayerResult, got {type(self.rows).__name__}")
        rows = []
        for i, row in enumerate(self.rows):
            if isinstance(row, dict):
                row = LayerResult.from_dict(row)
            elif not isinstance(row, LayerResult):
                raise TypeError(f"Report.rows[{i}] is a {type(row).__name__}; expected a LayerResult (or its dict)")
            rows.append(row)
        self.rows = rows
        if self.provenance is None:
            self.provenance = {}
        if not isinstance(self.provenance, dict):
            raise TypeError(f"Report.provenance must be a dict, got {type(self.provenance).__name__}")
        if self.notes is None:
            self.notes = []
        if isinstance(self.notes, str) or not isinstance(self.notes, (list, tuple)):
            raise TypeError(f"Report.notes must be a list of str, got {type(self.notes).__name__}")
        self.notes = list(self.notes)

    # ------------------------------------------------------------------ text

    def summary(self, *, max_label: int = 24) -> str:
        """A terminal table, one line per (input, layer), then the notes and a provenance line.

        Example::

            >>> from jacobiscope.report import Report
            >>> print(Report([], {"model": "demo"}, ["nothing measured"]).summary())
            (no rows)
            Notes:
              - nothing measured
            Provenance: model=demo

        Columns: layer, mode, input (index: label, cut to ``max_label`` characters), the final state norm
        (RMS per token), the largest ``||J||_2`` over the sampled loops, the spectral radius and complex
        (oscillatory) share of the top-k eigenvalues, the largest Lyapunov exponent with its standard error
        (nats per loop), the final effective cluster count, the regime and the flags. "-" means not measured.
        """
        headers, body = self._summary_cells(max_label=max_label)
        lines = [_text_table(headers, body)] if body else ["(no rows)"]
        outcome = self.outcome_summary()
        if outcome:
            lines.append(outcome)
        if self.notes:
            lines.append("Notes:")
            lines.extend(f"  - {note}" for note in self.notes)
        provenance = ", ".join(f"{key}={value}" for key, value in _flatten(self.provenance))
        lines.append(f"Provenance: {provenance or '-'}")
        return "\n".join(lines)

    def outcome_summary(self) -> str:
        """One sentence on what the model made of its inputs, when its rows carry an ``outcome`` ("" otherwise).

        Example::

            >>> from jacobiscope.report import LayerResult, Report
            >>> rows = [LayerResult(i, f"p{i}", 0, "loop", 1.0, 8, [81, 4], [1.0] * 9, [0.1] * 8, [], None, None,
            ...                     None, None, None, None, "converging", {}, [], 0.0, outcome={"solved": i == 0})
            ...         for i in range(2)]
            >>> Report(rows, {}, []).outcome_summary()
            'Outcome at 8 loops: 1 of 2 inputs solved (p0); not solved: p1.'
        """
        judged = [row for row in self.rows if isinstance(row.outcome, dict) and "solved" in row.outcome]
        if not judged:
            return ""
        solved = [row for row in judged if row.outcome["solved"]]
        unsolved = [row for row in judged if not row.outcome["solved"]]
        loops = sorted({row.loops for row in judged})
        at = f"{loops[0]} loops" if len(loops) == 1 else "loops " + ", ".join(map(str, loops))
        text = f"Outcome at {at}: {len(solved)} of {_plural(len(judged), 'input')} solved"
        if solved:
            text += " (" + ", ".join(str(row.input_label) for row in solved) + ")"
        if unsolved:
            text += "; not solved: " + ", ".join(str(row.input_label) for row in unsolved)
        return text + "."

    def _summary_cells(self, *, max_label: int | None) -> tuple[list[str], list[list[str]]]:
        headers = ["layer", "mode", "input", "state norm", "max ||J||2", "rho(J)", "complex", "lambda_max +/- se",
                   "eff. clusters", "regime", "flags"]
        with_outcome = any(row.outcome is not None for row in self.rows)
        if with_outcome:
            headers.insert(-1, "outcome")
        extra_columns = _extra_columns(self.rows)
        headers[-1:-1] = [header for _, header in extra_columns]
        body = []
        for row in self.rows:
            s = row.scalars()
            label = _single_line(str(row.input_label))
            if max_label is not None:
                label = _shorten(label, max_label)
            complex_share = s["complex_fraction"]
            if _is_number(complex_share) and math.isfinite(complex_share):
                complex_cell = f"{100 * complex_share:.0f}%"
            else:
                complex_cell = _num(complex_share)
            if s["lambda_max"] is None:
                lyapunov_cell = "-"
            elif s["lambda_max_stderr"] is None:
                lyapunov_cell = _num(s["lambda_max"])
            else:
                lyapunov_cell = f"{_num(s['lambda_max'])} +/- {_num(s['lambda_max_stderr'], '.2g')}"
            body.append([
                str(row.layer),
                str(row.mode),
                f"{row.input_index}: {label}",
                _num(s["final_state_norm"], ".4g"),
                _num(s["max_spectral_norm"], ".4g"),
                _num(s["spectral_radius"], ".4g"),
                complex_cell,
                lyapunov_cell,
                _num(s["final_effective_clusters"], ".3g"),
                str(row.regime),
                "; ".join(_single_line(str(flag)) for flag in row.flags) or "-",
            ])
            if with_outcome:
                body[-1].insert(-1, _outcome_cell(row.outcome))
            cells = _extra_cells(row, extra_columns)
            body[-1][-1:-1] = cells
        return headers, body

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        inputs = len({row.input_index for row in self.rows})
        layers = len({row.layer for row in self.rows})
        flagged = sum(1 for row in self.rows if row.flags)
        n = len(self.rows)
        text = f"<Report: {_plural(n, 'row')} ({_plural(inputs, 'input')} x {_plural(layers, 'layer')})"
        if flagged:
            text += f", {flagged} flagged"
        if "model" in self.provenance:
            text += f", model={self.provenance['model']!r}"
        return text + ">"

    def _repr_html_(self) -> str:
        return self._html_tables()

    def __eq__(self, other):
        if not isinstance(other, Report):
            return NotImplemented
        return _same(_plain_or_raw(self), _plain_or_raw(other))

    def validate(self) -> "Report":
        """Check every row against the contract; raise ValueError listing all problems, else return self.

        Example::

            >>> from jacobiscope.report import Report
            >>> Report([], {}, []).validate()
            <Report: 0 rows (0 inputs x 0 layers)>
        """
        problems = []
        for i, row in enumerate(self.rows):
            problems += [f"rows[{i}] (layer {row.layer}, input {row.input_index}): {p}" for p in row.validate()]
        for i, note in enumerate(self.notes):
            if not isinstance(note, str):
                problems.append(f"notes[{i}] is a {type(note).__name__}, expected str")
        try:
            _plain(self.provenance, "Report.provenance")
        except TypeError as error:
            problems.append(str(error))
        if problems:
            raise ValueError("the report does not match the LayerResult contract:\n  " + "\n  ".join(problems))
        return self

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict:
        """Plain Python values: ``{"provenance", "notes", "rows": [row dicts]}``; NaN and Inf stay floats.

        Example::

            >>> from jacobiscope.report import Report
            >>> Report([], {"seed": 0}, []).to_dict()
            {'provenance': {'seed': 0}, 'notes': [], 'rows': []}
        """
        return {
            "provenance": _plain(self.provenance, "Report.provenance"),
            "notes": _plain(self.notes, "Report.notes"),
            "rows": [row.to_dict() for row in self.rows],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Report":
        """Build a report from `to_dict` output (or parsed JSON, after its non-finite values are restored).

        Example::

            >>> from jacobiscope.report import Report
            >>> Report.from_dict({"provenance": {}, "notes": [], "rows": []})
            <Report: 0 rows (0 inputs x 0 layers)>
        """
        if not isinstance(data, dict) or "rows" not in data:
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"not a jacobiscope report: expected a dict with rows, provenance and notes, got {got}")
        if not isinstance(data["rows"], list):
            raise ValueError(f"not a jacobiscope report: rows must be a list, got {type(data['rows']).__name__}")
        rows = [LayerResult.from_dict(row) for row in data["rows"]]
        return cls(rows=rows, provenance=data.get("provenance") or {}, notes=data.get("notes") or [])

    def to_json(self, path=None) -> str:
        """The report as standard JSON text; written atomically to ``path`` when given.

        Example::

            >>> import json, math
            >>> from jacobiscope.report import Report
            >>> text = Report([], {"tolerance": math.nan, "limit": math.inf}, []).to_json()
            >>> json.loads(text)["provenance"], json.loads(text)["nonfinite"]
            ({'tolerance': None, 'limit': None}, {'/provenance/tolerance': 'nan', '/provenance/limit': 'inf'})

        Strict JSON (RFC 8259) has no NaN or Infinity, and other tools reject Python's ``NaN`` literal, so every
        non-finite float is written as null. The top-level ``"nonfinite"`` object maps the JSON Pointer of each
        one to ``"nan"``, ``"inf"`` or ``"-inf"``, which is how `from_json` restores them exactly. NaN where
        the row schema promises a float (state_norm, step_size, spectral norm values, eigenvalues, energy, the
        oscillation / lyapunov / clusters numbers, seconds) needs no entry: null there already means NaN.
        Lists of numbers are kept on one line.
        """
        nonfinite: dict = {}
        rows = [_encode_row(row.to_dict(), f"/rows/{i}", nonfinite) for i, row in enumerate(self.rows)]
        document = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "provenance": _encode(_plain(self.provenance, "Report.provenance"), "/provenance", nonfinite, False),
            "notes": _encode(_plain(self.notes, "Report.notes"), "/notes", nonfinite, False),
            "rows": rows,
            "nonfinite": nonfinite,
        }
        text = _NUMBER_ARRAY.sub(_collapse_array, json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False))
        text += "\n"
        if path is not None:
            atomic_write_text(path, text)
        return text

    @classmethod
    def from_json(cls, source) -> "Report":
        """Read a report written by `to_json`: a path (str or PathLike) or the JSON text itself.

        Example::

            >>> from jacobiscope.report import Report
            >>> Report.from_json('{"provenance": {"model": "demo"}, "notes": [], "rows": []}')
            <Report: 0 rows (0 inputs x 0 layers), model='demo'>

        A str that starts with ``{`` (after whitespace) is JSON text; anything else is a path. Python's
        ``NaN``/``Infinity`` literals are accepted too.
        """
        if isinstance(source, (bytes, bytearray)):
            text = source.decode("utf-8")
        elif isinstance(source, str) and source.lstrip().startswith("{"):
            text = source
        elif isinstance(source, (str, os.PathLike)):
            text = Path(source).read_text(encoding="utf-8")
        else:
            raise TypeError(f"Report.from_json expected a path or JSON text, got {type(source).__name__}")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not a jacobiscope report: invalid JSON ({error})") from None
        if not isinstance(data, dict):
            raise ValueError(f"not a jacobiscope report: expected a JSON object, got {type(data).__name__}")
        if "format" in data and data["format"] != FORMAT:
            raise ValueError(f"not a jacobiscope report: format is {data['format']!r}, expected {FORMAT!r}")
        version = data.get("format_version", FORMAT_VERSION)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ValueError(
                f"this report has format_version {version!r}; this jacobiscope reads up to {FORMAT_VERSION}. "
                "Upgrade jacobiscope (pip install -U jacobiscope) to read it."
            )
        for pointer, kind in (data.get("nonfinite") or {}).items():
            _set_pointer(data, pointer, _NONFINITE_VALUES.get(kind, kind))
        return cls.from_dict(data)

    # ------------------------------------------------------------------ pandas

    def to_dataframe(self):
        """A pandas DataFrame, one row per `LayerResult`, with the scalar columns of `DATAFRAME_COLUMNS`.

        Example::

            >>> from jacobiscope.report import Report
            >>> Report([], {}, []).to_dataframe().shape  # doctest: +SKIP
            (0, 35)

        Lists (trajectories, eigenvalues, histories) stay in the report: take them from ``report.rows``.
        Not measured is NaN (None in all-empty columns); ``flags`` is the flags joined by ``"; "``.
        """
        try:
            import pandas
        except ImportError:
            raise ImportError("Report.to_dataframe needs pandas, which is not installed: pip install pandas") from None
        return pandas.DataFrame([row.scalars() for row in self.rows], columns=list(DATAFRAME_COLUMNS))

    # ------------------------------------------------------------------ figures

    def plot(self, rows=None) -> dict:
        """Matplotlib figures of the report, by name; never opens a window.

        Example::

            >>> from jacobiscope.report import Report
            >>> sorted(Report([], {}, []).plot())  # doctest: +SKIP
            ['eigenvalues', 'lyapunov', 'norms']

        Arguments:
            rows: which rows to draw: None (all), or a list of row indices and/or `LayerResult` objects.

        Returns ``{"eigenvalues", "norms", "lyapunov"}`` always (a figure says when it has no data), plus
        ``"energy"`` when a row has a pseudo-energy and ``"clusters"`` when a row has cluster measures:

        - eigenvalues: the top-k Jacobian eigenvalues in the complex plane with the unit circle.
        - norms: ``||J||_2`` at the sampled loops, the state norm and the relative step size, against the loop.
        - lyapunov: the running estimate of every exponent against the loop, one panel per row.
        - energy: pseudo-energy against the loop.
        - clusters: the top eigenvalue and the (effective) cluster count against the loop.

        Figures are `matplotlib.figure.Figure` objects on the Agg canvas, made without pyplot: the global
        backend is not touched, nothing pops up, and they are freed with their last reference. Save one with
        ``fig.savefig("norms.png")``.
        """
        Figure, FigureCanvasAgg = _matplotlib()
        from matplotlib import colormaps

        selected = self._select(rows)
        with_mode = len({row.mode for row in selected}) > 1
        with_input = len({row.input_index for row in selected}) > 1
        labels = [row.label(with_mode=with_mode, with_input=with_input) for row in selected]
        palette = colormaps["tab10"] if len(selected) <= 10 else colormaps["viridis"]
        colors = [palette(i if len(selected) <= 10 else i / max(len(selected) - 1, 1)) for i in range(len(selected))]

        def new_figure(width, height, layout="constrained"):
            figure = Figure(figsize=(width, height), layout=layout)
            FigureCanvasAgg(figure)
            return figure

        figures = {
            "eigenvalues": _plot_eigenvalues(new_figure, selected, labels, colors),
            "norms": _plot_norms(new_figure, selected, labels, colors),
            "lyapunov": _plot_lyapunov(new_figure, selected, labels, colormaps["viridis"]),
        }
        if any(row.energy for row in selected):
            figures["energy"] = _plot_energy(new_figure, selected, labels, colors)
        if any(isinstance(row.clusters, dict) and row.clusters for row in selected):
            figures["clusters"] = _plot_clusters(new_figure, selected, labels, colors)
        from .diagnostics._base import _REGISTRY

        for name in dict.fromkeys(name for row in selected for name in (row.extra or {})):
            diagnostic = _REGISTRY.get(name)
            if diagnostic is None:
                continue
            # A registered diagnostic draws its own figure over the rows that carry its result.
            carrying = [(row, label) for row, label in zip(selected, labels) if name in (row.extra or {})]
            figure = diagnostic.figure([row for row, _ in carrying], [label for _, label in carrying])
            if figure is not None:
                figures[name] = figure
        return figures

    def _select(self, rows) -> list:
        if rows is None:
            return list(self.rows)
        if isinstance(rows, (int, LayerResult)):
            rows = [rows]
        selected = []
        for item in rows:
            if isinstance(item, LayerResult):
                selected.append(item)
            elif isinstance(item, int) and not isinstance(item, bool):
                if not -len(self.rows) <= item < len(self.rows):
                    raise IndexError(f"row index {item} is out of range: the report has {len(self.rows)} rows")
                selected.append(self.rows[item])
            else:
                raise TypeError(f"rows must hold row indices or LayerResult objects, got {type(item).__name__}")
        return selected

    # ------------------------------------------------------------------ HTML

    def save_html(self, path, *, figures: bool = True, dpi: int = 100) -> Path:
        """Write one self-contained HTML file (tables and figures inline, no external resources); return its path.

        Example::

            >>> import pathlib, tempfile
            >>> from jacobiscope.report import Report
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     path = Report([], {"model": "demo"}, []).save_html(pathlib.Path(folder) / "r.html", figures=False)
            ...     "<title>jacobiscope report: demo</title>" in path.read_text()
            True

        The file holds the provenance table, the notes, the summary table (full input labels), each row's
        flags and evidence, and every `plot` figure as an inline base64 PNG at ``dpi``. All text is
        HTML-escaped. ``figures=False`` writes the tables only and does not need matplotlib. Written atomically.
        """
        images = []
        if figures:
            for name, figure in self.plot().items():
                buffer = io.BytesIO()
                # No "Software" chunk: the default one carries matplotlib's URL, and the file names nothing outside.
                figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
                images.append((name, base64.b64encode(buffer.getvalue()).decode("ascii")))
        title = "jacobiscope report"
        if "model" in self.provenance:
            title += f": {self.provenance['model']}"
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_esc(title)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            f"<h1>{_esc(title)}</h1>",
            self._html_tables(),
        ]
        if images:
            parts.append("<h2>Figures</h2>")
            for name, data in images:
                parts.append(
                    f'<figure id="figure-{_esc(name)}"><img alt="{_esc(name)} figure" '
                    f'src="data:image/png;base64,{data}"><figcaption>{_esc(_FIGURE_CAPTIONS.get(name, name))}'
                    "</figcaption></figure>"
                )
        if self.rows:
            parts.append("<h2>Evidence</h2>")
            for row in self.rows:
                evidence = json.dumps(_plain(row.evidence, "LayerResult.evidence"), indent=2, ensure_ascii=False,
                                      default=str)
                flags = "".join(f"<li>{_esc(flag)}</li>" for flag in row.flags)
                reason = row.evidence.get("reason") if isinstance(row.evidence, dict) else None
                reason = f" &mdash; {_esc(reason)}" if isinstance(reason, str) else ""
                parts.append(
                    f"<details><summary>{_esc(row.label())}: {_esc(row.regime)}{reason} "
                    f"({_esc(_shorten(_single_line(str(row.input_label)), 60))})</summary>"
                    + (f'<ul class="flags">{flags}</ul>' if flags else "")
                    + f"<pre>{_esc(evidence)}</pre></details>"
                )
        parts += [f'<footer>Written by jacobiscope {_esc(_version())}.</footer>', "</body>", "</html>", ""]
        return atomic_write_text(path, "\n".join(parts), errors="xmlcharrefreplace")

    def _html_tables(self) -> str:
        parts = ["<h2>Provenance</h2>", '<table class="provenance">']
        for key, value in _flatten(self.provenance):
            parts.append(f"<tr><th>{_esc(key)}</th><td>{_esc(value)}</td></tr>")
        parts.append("</table>")
        if self.notes:
            parts.append("<h2>Notes</h2><ul>")
            parts += [f"<li>{_esc(note)}</li>" for note in self.notes]
            parts.append("</ul>")
        parts.append("<h2>Summary</h2>")
        headers, body = self._summary_cells(max_label=None)
        if not body:
            parts.append("<p>(no rows)</p>")
            return "\n".join(parts)
        parts.append('<table class="summary"><thead><tr>')
        parts += [f"<th>{_esc(h)}</th>" for h in headers]
        parts.append("</tr></thead><tbody>")
        for row, cells in zip(self.rows, body):
            css = ' class="flagged"' if row.flags else ""
            tds = "".join(
                f'<td class="regime-{_esc(cell)}">{_esc(cell)}</td>' if header == "regime" else f"<td>{_esc(cell)}</td>"
                for header, cell in zip(headers, cells)
            )
            parts.append(f"<tr{css}>{tds}</tr>")
        parts.append("</tbody></table>")
        outcome = self.outcome_summary()
        if outcome:
            parts.append(f'<p class="outcome">{_esc(outcome)}</p>')
        return "\n".join(parts)


# --------------------------------------------------------------------------------------------------- plotting


def _extra_columns(rows) -> list[tuple[str, str]]:
    """(diagnostic, header) of every summary column that the rows' extra diagnostics provide, in first-seen order."""
    columns = []
    for row in rows:
        for name, result in (row.extra or {}).items():
            for header in _diagnostic_columns(name, result):
                if (name, header) not in columns:
                    columns.append((name, header))
    return columns


def _diagnostic_columns(name: str, result) -> dict:
    """A registered diagnostic's own columns for ``result``; a scalar result is its own column; else none."""
    from .diagnostics._base import _REGISTRY

    diagnostic = _REGISTRY.get(name)
    if diagnostic is not None:
        try:
            return dict(diagnostic.columns(result))
        except Exception:  # noqa: BLE001 - a user's column code must not break the report
            return {name: "?"}
    return {name: result} if _is_number(result) or isinstance(result, str) else {}


def _extra_cells(row, columns) -> list[str]:
    cells = []
    for name, header in columns:
        result = (row.extra or {}).get(name)
        value = _diagnostic_columns(name, result).get(header) if result is not None else None
        cells.append("-" if value is None else _num(value, ".4g") if _is_number(value) else _single_line(str(value)))
    return cells


def _outcome_cell(outcome) -> str:
    if not isinstance(outcome, dict):
        return "-"
    if "solved" in outcome:
        return "solved" if outcome["solved"] else "not solved"
    return ", ".join(f"{key}={_display(value)}" for key, value in outcome.items()) or "-"


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            'Report.plot needs matplotlib, which is not installed: pip install "jacobiscope[plot]"'
        ) from None
    return Figure, FigureCanvasAgg


def _finite_or_nan(values) -> list:
    """Floats for matplotlib: None and +-Inf become NaN (a gap in the line) instead of breaking the axis limits."""
    out = []
    for value in values or []:
        out.append(float(value) if _is_number(value) and math.isfinite(value) else math.nan)
    return out


def _auto_log(ax, series) -> None:
    """Log scale when positive data spans more than two decades (a diverging norm would flatten the rest)."""
    values = [v for s in series for v in s if not math.isnan(v)]
    if values and min(values) > 0 and max(values) / min(values) > 100:
        ax.set_yscale("log")


def _legend(ax, count: int) -> None:
    if not ax.get_legend_handles_labels()[0]:
        return
    if count <= 6:
        ax.legend(fontsize="small")
    else:
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0), ncols=1 + count // 20)


def _points(values) -> dict:
    """Small markers on short or gappy series: a finite value between two NaNs would otherwise be invisible."""
    return {"marker": ".", "ms": 4} if len(values) <= 40 or any(math.isnan(v) for v in values) else {}


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def _plot_eigenvalues(new_figure, rows, labels, colors):
    figure = new_figure(7.5, 5.5)
    ax = figure.add_subplot()
    angles = [2 * math.pi * i / 256 for i in range(257)]
    ax.plot([math.cos(a) for a in angles], [math.sin(a) for a in angles], color="0.5", lw=1, label="unit circle",
            gid="unit-circle")
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    drawn = 0
    for i, (row, label, color) in enumerate(zip(rows, labels, colors)):
        if not row.eigenvalues:
            continue
        pairs = [pair for pair in row.eigenvalues if isinstance(pair, (list, tuple)) and len(pair) == 2]
        real = _finite_or_nan(p[0] for p in pairs)
        imag = _finite_or_nan(p[1] for p in pairs)
        suffix = f" (t={row.eigen_loop})" if row.eigen_loop is not None else ""
        ax.plot(real, imag, linestyle="none", marker=_MARKERS[i % len(_MARKERS)], ms=5, alpha=0.8, color=color,
                label=label + suffix)
        drawn += 1
    # Outside the axes: eigenvalues can sit anywhere in the plane, a legend inside would cover some.
    if drawn:
        ax.legend(fontsize="small" if drawn <= 6 else "x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  ncols=1 + drawn // 20)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("Re $\\lambda$")
    ax.set_ylabel("Im $\\lambda$")
    ax.set_title("Jacobian eigenvalues (top-k by modulus)")
    if not drawn:
        _no_data(ax, "no eigenvalues in this report")
    return figure


def _plot_norms(new_figure, rows, labels, colors):
    figure = new_figure(14.0, 4.2)
    ax_sigma, ax_state, ax_step = figure.subplots(1, 3)
    sigma_series, state_series, step_series = [], [], []
    for row, label, color in zip(rows, labels, colors):
        samples = [e for e in row.spectral_norm if isinstance(e, dict) and "loop" in e]
        if samples:
            values = _finite_or_nan(e.get("value") for e in samples)
            ax_sigma.plot([e["loop"] for e in samples], values, marker="o", ms=3, color=color, label=label)
            sigma_series.append(values)
        if row.state_norm:
            values = _finite_or_nan(row.state_norm)
            ax_state.plot(range(len(values)), values, color=color, label=label, **_points(values))
            state_series.append(values)
        if row.step_size:
            values = _finite_or_nan(row.step_size)
            ax_step.plot(range(len(values)), values, color=color, label=label, **_points(values))
            step_series.append(values)
    ax_sigma.axhline(1.0, color="0.5", ls=":", lw=1)
    for ax, series, title, ylabel in (
        (ax_sigma, sigma_series, "Jacobian spectral norm", "$\\|J\\|_2$"),
        (ax_state, state_series, "state norm (RMS per token)", "$\\|X_t\\|$"),
        (ax_step, step_series, "relative step", "$\\|X_{t+1}-X_t\\| / \\|X_t\\|$"),
    ):
        ax.set_title(title)
        ax.set_xlabel("loop t")
        ax.set_ylabel(ylabel)
        _auto_log(ax, series)
        if not series:
            _no_data(ax, "not measured")
    _legend(ax_step, len(rows))
    return figure


def _plot_lyapunov(new_figure, rows, labels, colormap):
    measured = [(row, label) for row, label in zip(rows, labels)
                if isinstance(row.lyapunov, dict) and row.lyapunov.get("history")]
    if not measured:
        figure = new_figure(6.0, 4.0)
        ax = figure.add_subplot()
        ax.set_title("Lyapunov exponents")
        _no_data(ax, "no Lyapunov exponents in this report")
        return figure
    columns = min(3, len(measured))
    lines = math.ceil(len(measured) / columns)
    height = 3.2 * lines
    if len(measured) <= 12:
        figure = new_figure(4.6 * columns, height)
    else:
        # The constrained-layout solver costs as much as drawing once per panel: fixed margins for big grids.
        figure = new_figure(4.6 * columns, height, layout=None)
        figure.subplots_adjust(left=0.07, right=0.98, top=1 - 0.55 / height, bottom=0.45 / height, hspace=0.55,
                               wspace=0.3)
    axes = figure.subplots(lines, columns, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= len(measured):
            ax.set_visible(False)
            continue
        row, label = measured[index]
        history = [step for step in row.lyapunov["history"] if isinstance(step, (list, tuple))]
        k = max((len(step) for step in history), default=0)
        loops = list(range(1, len(history) + 1))
        for j in range(k):
            values = _finite_or_nan(step[j] if j < len(step) else None for step in history)
            ax.plot(loops, values, color=colormap(0.85 * j / max(k - 1, 1)), lw=1.2, **_points(values),
                    label=f"$\\lambda_{{{j + 1}}}$" if k <= 4 else None)
        ax.axhline(0.0, color="0.5", ls=":", lw=1)
        exponents = row.lyapunov.get("exponents") or []
        stderr = row.lyapunov.get("stderr") or []
        title = label
        if exponents:
            title += f"\n$\\lambda_1$ = {_num(exponents[0])}"
            if stderr:
                title += f" $\\pm$ {_num(stderr[0], '.2g')}"
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("loop")
        ax.set_ylabel("running estimate (nats/loop)")
        if k <= 4:
            ax.legend(fontsize="x-small")
    return figure


def _plot_energy(new_figure, rows, labels, colors):
    figure = new_figure(7.0, 4.2)
    ax = figure.add_subplot()
    drawn = 0
    for row, label, color in zip(rows, labels, colors):
        if row.energy:
            values = _finite_or_nan(row.energy)
            ax.plot(range(len(values)), values, color=color, label=label, **_points(values))
            drawn += 1
    ax.set_title("pseudo-energy $E_t = -\\mathrm{Tr}(X_t^\\top Y_t)$")
    ax.set_xlabel("loop t")
    ax.set_ylabel("$E_t$")
    _legend(ax, drawn)
    return figure


def _plot_clusters(new_figure, rows, labels, colors):
    figure = new_figure(11.0, 4.2)
    ax_top, ax_count = figure.subplots(1, 2)
    for row, label, color in zip(rows, labels, colors):
        if not isinstance(row.clusters, dict):
            continue
        top = _finite_or_nan(row.clusters.get("top_eigenvalue"))
        if top:
            ax_top.plot(range(len(top)), top, color=color, label=label)
        effective = _finite_or_nan(row.clusters.get("effective_clusters"))
        if effective:
            ax_count.plot(range(len(effective)), effective, color=color, label=label)
        count = _finite_or_nan(row.clusters.get("cluster_count"))
        if count:
            ax_count.plot(range(len(count)), count, color=color, ls="--", lw=1)
    ax_top.set_title("top eigenvalue")
    ax_count.set_title("clusters: effective (solid), count (dashed)")
    for ax in (ax_top, ax_count):
        ax.set_xlabel("loop t")
    _legend(ax_count, len(rows))
    return figure


_FIGURE_CAPTIONS = {
    "eigenvalues": "Top-k Jacobian eigenvalues in the complex plane; outside the unit circle is locally expanding.",
    "norms": "Jacobian spectral norm at the sampled loops, state norm and relative step size against the loop.",
    "lyapunov": "Running estimates of the Lyapunov exponents (nats per loop); near 0 is critical.",
    "energy": "Pseudo-energy against the loop.",
    "clusters": "Top eigenvalue and the (effective) number of token clusters against the loop.",
}

_CSS = (
    "body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em;color:#222;max-width:1400px}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
    "table.summary td{font-variant-numeric:tabular-nums;white-space:nowrap}"
    "table.summary td:nth-child(3){white-space:normal;max-width:28em;overflow-wrap:anywhere}"
    "thead th{background:#f2f2f2}"
    "tr.flagged{background:#fff3f0}"
    ".regime-chaotic,.regime-diverging{color:#b00020;font-weight:600}"
    ".regime-critical{color:#8a5a00;font-weight:600}"
    ".regime-converging{color:#1b6e20}"
    ".regime-oscillating{color:#3a3ab0}"
    "figure{margin:1em 0}img{max-width:100%;height:auto}"
    "figcaption{color:#555;font-size:0.9em}"
    "pre{background:#f7f7f7;padding:0.5em;overflow:auto}"
    "ul.flags{color:#b00020}"
    "footer{margin-top:2em;color:#777;font-size:0.85em}"
)


# --------------------------------------------------------------------------------------------------- helpers


def _version() -> str:
    # Imported here, not at module level: jacobiscope/__init__ may import this module.
    try:
        import jacobiscope

        return str(getattr(jacobiscope, "__version__", "unknown"))
    except Exception:  # pragma: no cover - a broken install still writes its report
        return "unknown"


def _plain(value, where: str):
    """Plain JSON-able Python values; tensors and NumPy values through ``tolist()``, dtypes/devices/paths as str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where} has the key {key!r} ({type(key).__name__}); JSON keys are strings, so it would come "
                    f"back as {str(key)!r}. Use str keys."
                )
            out[key] = _plain(item, f"{where}[{key!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if hasattr(value, "tolist"):  # torch.Tensor, numpy arrays and scalars
        return _plain(value.tolist(), where)
    if isinstance(value, os.PathLike) or type(value).__module__.startswith("torch") and type(value).__name__ in (
        "dtype", "device"
    ):
        return str(value)
    if isinstance(value, complex):
        raise TypeError(f"{where} is complex ({value!r}); store it as [re, im]")
    raise TypeError(
        f"{where} is a {type(value).__name__}, which JSON cannot hold; store a float, int, str, bool, None, "
        "list or dict"
    )


def _plain_or_raw(obj):
    try:
        return obj.to_dict()
    except TypeError:
        return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _same(a, b) -> bool:
    """Equality of plain values where NaN equals NaN (and only NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return a == b


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nulls_to_nan(value):
    if value is None:
        return math.nan
    if isinstance(value, list):
        return [_nulls_to_nan(item) for item in value]
    return value


def _last(values):
    return values[-1] if isinstance(values, (list, tuple)) and values else None


def _num(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if not _is_number(value):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return format(value, spec)


def _single_line(text: str) -> str:
    return " ".join(text.split())


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _flatten(mapping: dict, prefix: str = ""):
    """``(dotted key, display string)`` pairs of a nested dict (``versions.torch``)."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _flatten(value, name + ".")
        elif isinstance(value, (list, tuple)):
            yield name, "[" + ", ".join(_display(item) for item in value) + "]"
        else:
            yield name, _display(value)


def _display(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return _num(value, ".6g")
    return str(value)


def _text_table(headers: list, body: list) -> str:
    """Aligned columns, numbers right-aligned; the last column (flags) is not padded."""
    columns = len(headers)
    widths = [max([len(headers[c])] + [len(r[c]) for r in body]) for c in range(columns)]
    right = [c not in (1, 2, 9, 10) for c in range(columns)]  # mode, input, regime, flags are text

    def line(cells):
        out = []
        for c, cell in enumerate(cells):
            if c == columns - 1:
                out.append(cell)
            elif right[c]:
                out.append(cell.rjust(widths[c]))
            else:
                out.append(cell.ljust(widths[c]))
        return "  ".join(out).rstrip()

    header = "  ".join(h.ljust(widths[c]) if c < columns - 1 else h for c, h in enumerate(headers))
    rule = "  ".join("-" * widths[c] for c in range(columns))
    return "\n".join([header, rule, *(line(r) for r in body)])


# JSON encoding of non-finite floats: null, plus a JSON Pointer in "nonfinite" unless the schema implies NaN.

_NONFINITE_VALUES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _pointer_token(key) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _encode(value, pointer: str, nonfinite: dict, typed: bool):
    """Replace non-finite floats by None, recording them in ``nonfinite`` (NaN at a typed position needs no entry)."""
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            if not typed:
                nonfinite[pointer] = "nan"
        else:
            nonfinite[pointer] = "inf" if value > 0 else "-inf"
        return None
    if isinstance(value, dict):
        return {k: _encode(v, f"{pointer}/{_pointer_token(k)}", nonfinite, typed) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v, f"{pointer}/{i}", nonfinite, typed) for i, v in enumerate(value)]
    return value


def _encode_row(row: dict, pointer: str, nonfinite: dict) -> dict:
    out = {}
    for name, value in row.items():
        where = f"{pointer}/{name}"
        if name in _FLOAT_LIST_FIELDS:
            out[name] = _encode(value, where, nonfinite, typed=isinstance(value, list))
        elif name in _FLOAT_SCALAR_FIELDS:
            out[name] = _encode(value, where, nonfinite, typed=True)
        elif name in _FLOAT_DICT_KEYS and isinstance(value, dict):
            keys = _FLOAT_DICT_KEYS[name]
            out[name] = {
                k: _encode(v, f"{where}/{_pointer_token(k)}", nonfinite, typed=k in keys) for k, v in value.items()
            }
        elif name == "spectral_norm" and isinstance(value, list):
            out[name] = [
                {k: _encode(v, f"{where}/{i}/{_pointer_token(k)}", nonfinite, typed=k in _SPECTRAL_NORM_FLOAT_KEYS)
                 for k, v in entry.items()} if isinstance(entry, dict)
                else _encode(entry, f"{where}/{i}", nonfinite, False)
                for i, entry in enumerate(value)
            ]
        else:
            out[name] = _encode(value, where, nonfinite, typed=False)
    return out


def _set_pointer(document, pointer: str, value) -> None:
    if not isinstance(pointer, str) or not pointer.startswith("/"):
        raise ValueError(f"invalid report: nonfinite key {pointer!r} is not a JSON Pointer")
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]
    target = document
    try:
        for token in tokens[:-1]:
            target = target[int(token)] if isinstance(target, list) else target[token]
        last = tokens[-1]
        if isinstance(target, list):
            target[int(last)] = value
        elif isinstance(target, dict) and last in target:
            target[last] = value
        else:
            raise KeyError(last)
    except (KeyError, IndexError, ValueError, TypeError):
        raise ValueError(
            f"invalid report: nonfinite entry {pointer!r} points to nothing in the file (was it edited by hand?)"
        ) from None


# A JSON array of numbers as json.dumps(indent=...) lays it out: one number per line. The raw newlines can only be
# layout (inside JSON strings a newline is always escaped), so this never touches string contents.
_JSON_SCALAR = r"(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|null|true|false)"
_NUMBER_ARRAY = re.compile(r"\[\n\s*(" + _JSON_SCALAR + r"(?:,\n\s*" + _JSON_SCALAR + r")*)\n\s*\]")


def _collapse_array(match) -> str:
    return "[" + ", ".join(item.strip() for item in match.group(1).split(",")) + "]"
