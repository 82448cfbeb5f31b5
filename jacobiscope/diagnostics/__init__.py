"""Diagnostics of looped maps: one object each, one registry, and `measure` to run them on one trajectory.

Example::

    >>> import torch, jacobiscope
    >>> jacobiscope.list_diagnostics()[:3]
    ['spectral_norm', 'eigenvalues', 'lyapunov']
    >>> row = jacobiscope.measure(lambda x: 0.5 * x, torch.ones(4, dtype=torch.float64), loops=5,
    ...                           diagnostics=["lyapunov"])
    >>> round(row.lyapunov["exponents"][0], 4)   # log 0.5
    -0.6931

A diagnostic is a `Diagnostic` subclass: a name, a cost estimate (what `describe` prints), ``compute`` on a
`MeasureContext`, summary-table columns and a figure. `register_diagnostic` adds one, from anywhere; `measure`,
`analyze`, `describe` and the report (text, JSON, HTML) then include it without any other change.
"""
from ._base import (
    Diagnostic, MeasureContext, get_diagnostic, list_diagnostics, register_diagnostic, unregister_diagnostic
)
from ._fixed_points import FixedPointsMeasurement
from ._halting import HaltingMeasurement
from ._loop_depth import LoopDepthMeasurement
from ._measure import measure
from ._results import (
    ClusterMeasurement, DiagnosticResult, EigenvaluesMeasurement, EnergyMeasurement, LyapunovMeasurement, RegimeMeasurement, SpectralNormMeasurement
)

__all__ = ["Diagnostic", "MeasureContext", "get_diagnostic", "list_diagnostics", "register_diagnostic",
           "unregister_diagnostic", "measure", "DiagnosticResult", "SpectralNormMeasurement", "EigenvaluesMeasurement",
           "LyapunovMeasurement", "ClusterMeasurement", "EnergyMeasurement", "RegimeMeasurement",
           "FixedPointsMeasurement", "HaltingMeasurement", "LoopDepthMeasurement"]
