"""The typed results of the built-in diagnostics, gathered (each is defined in its diagnostic's own file).

Example::

    >>> import torch, jacobiscope
    >>> row = jacobiscope.measure(lambda x: 0.5 * x, torch.ones(3, dtype=torch.float64), loops=8,
    ...                           diagnostics=["lyapunov"])
    >>> lyapunov = row.diagnostic("lyapunov")
    >>> type(lyapunov).__name__, round(lyapunov.max, 4)
    ('LyapunovMeasurement', -0.6931)
    >>> jacobiscope.diagnostics.LyapunovMeasurement.from_dict(lyapunov.to_dict()) == lyapunov
    True

A report row (`LayerResult`) holds each result typed in ``row.results[name]``; ``row.diagnostic(name)`` reads it.
A result also reads like the dict it is stored as (``result["exponents"]``), so code written against the plain
form keeps working.
"""
from __future__ import annotations

from ._clusters import ClusterMeasurement
from ._eigenvalues import EigenvaluesMeasurement
from ._energy import EnergyMeasurement
from ._lyapunov import LyapunovMeasurement
from ._regime import RegimeMeasurement
from ._result import DiagnosticResult, FigureEntry
from ._spectral_norm import SpectralNormMeasurement

__all__ = ["DiagnosticResult", "FigureEntry", "SpectralNormMeasurement", "EigenvaluesMeasurement",
           "LyapunovMeasurement", "ClusterMeasurement", "EnergyMeasurement", "RegimeMeasurement"]
