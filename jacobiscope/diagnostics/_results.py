"""Typed results of the built-in diagnostics: dataclasses with `to_dict` / `from_dict`.

Example::

    >>> import torch, jacobiscope
    >>> row = jacobiscope.measure(lambda x: 0.5 * x, torch.ones(3, dtype=torch.float64), loops=8,
    ...                           diagnostics=["lyapunov"])
    >>> lyapunov = row.diagnostic("lyapunov")
    >>> type(lyapunov).__name__, round(lyapunov.max, 4)
    ('LyapunovMeasurement', -0.6931)
    >>> jacobiscope.diagnostics.LyapunovMeasurement.from_dict(lyapunov.to_dict()) == lyapunov
    True

A report row (`LayerResult`) holds each result in its JSON form; ``row.diagnostic(name)`` gives it back typed.
A result also reads like the dict it is stored as (``result["exponents"]``), so code written against the plain
form keeps working.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields

__all__ = ["DiagnosticResult", "SpectralNormMeasurement", "EigenvaluesMeasurement", "LyapunovMeasurement", "ClusterMeasurement",
           "EnergyMeasurement", "RegimeMeasurement"]


@dataclass
class DiagnosticResult:
    """Base of typed results: `to_dict` (plain, JSON-able values), `from_dict` (checks the keys) and dict-style
    reads. Subclass it as a ``@dataclass`` to give your own diagnostic a typed result (set its ``result_type``)."""

    def to_dict(self) -> dict:
        from ..report._values import _plain

        return {f.name: _plain(getattr(self, f.name), f"{type(self).__name__}.{f.name}") for f in fields(self)}

    @classmethod
    def from_dict(cls, data):
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}.from_dict expected a dict, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in data]
        unknown = [key for key in data if key not in names]
        if missing or unknown:
            raise ValueError(f"{cls.__name__}.from_dict: expected keys {', '.join(names)}; "
                             f"missing {missing or 'none'}, unknown {unknown or 'none'}")
        return cls(**{name: data[name] for name in names if name in data})

    def __getitem__(self, key: str):
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self):
        return [f.name for f in fields(self)]


def _finite_max(values):
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return max(finite) if finite else math.nan


@dataclass
class SpectralNormMeasurement(DiagnosticResult):
    """``||J||_2`` at sampled loops: ``samples`` is ``[{"loop": t, "value": sigma, "tolerance": tol}, ...]``."""

    samples: list = field(default_factory=list)

    @property
    def loops(self) -> list[int]:
        return [sample["loop"] for sample in self.samples]

    @property
    def values(self) -> list[float]:
        return [sample["value"] for sample in self.samples]

    @property
    def max(self) -> float:
        """The largest finite sampled norm (NaN when none is finite)."""
        return _finite_max(self.values)


@dataclass
class EigenvaluesMeasurement(DiagnosticResult):
    """The Jacobian's top eigenvalues at ``loop`` as ``[re, im]`` pairs, with their oscillation measures
    (spectral_radius, complex_fraction, rotation angles, outside_unit_circle_fraction, max_residual)."""

    loop: int
    values: list
    oscillation: dict

    @property
    def complex_values(self) -> list[complex]:
        return [complex(re, im) for re, im in self.values]

    @property
    def spectral_radius(self) -> float:
        return float(self.oscillation.get("spectral_radius", math.nan))


@dataclass
class LyapunovMeasurement(DiagnosticResult):
    """The top-k Lyapunov exponents (nats per loop, largest first), their standard errors over loops, the running
    estimate after each loop (``history[t][i]``) and the Kaplan-Yorke dimension."""

    exponents: list
    stderr: list
    history: list
    kaplan_yorke: float

    @property
    def max(self) -> float:
        return self.exponents[0] if self.exponents else math.nan

    @property
    def max_stderr(self) -> float:
        return self.stderr[0] if self.stderr else math.nan


@dataclass
class ClusterMeasurement(DiagnosticResult):
    """Token-cluster order parameters per loop ``t = 0..`` (the last finite loop)."""

    top_eigenvalue: list
    effective_clusters: list
    cluster_count: list


@dataclass
class EnergyMeasurement(DiagnosticResult):
    """The pseudo-energy ``E_t = -Tr(X_t^T Y_t)`` per loop."""

    values: list


@dataclass
class RegimeMeasurement(DiagnosticResult):
    """The verdict (a `jacobiscope.dynamics.Regime` value) and the numbers behind it."""

    regime: str
    evidence: dict = field(default_factory=dict)
