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
`analyze`, `describe` and the report (text, JSON, HTML) then include it without any other change. Its ``options``
table (`Option`: kind, default, budget) declares what it reads from ``context.options``; `measure` checks every
option against the chosen diagnostics' tables before any loop runs. What a user's diagnostic raises or returns that a
report cannot hold is a `DiagnosticError` naming it; NaN/Inf in any result is flagged on the row.
"""
from ._base import (
    Diagnostic, DiagnosticDefinitionError, DiagnosticError, MeasureContext, Option, check_options, get_diagnostic,
    list_diagnostics, register_diagnostic, unregister_diagnostic
)
from ._attractors import AttractorsMeasurement
from ._depth_safety import DepthSafetyMeasurement
from ._exit_rules import best_rule_by_compute, exit_rule_tradeoffs
from ._fixed_points import FixedPointsMeasurement
from ._halting import HaltingMeasurement
from ._loop_depth import LoopDepthMeasurement
from ._measure import measure
from ._results import (
    ClusterMeasurement, DiagnosticResult, EigenvaluesMeasurement, EnergyMeasurement, FigureEntry, LyapunovMeasurement,
    RegimeMeasurement, SpectralNormMeasurement,
)
from ._row import LayerResult

__all__ = ["Diagnostic", "DiagnosticError", "DiagnosticDefinitionError", "Option", "check_options", "MeasureContext", "get_diagnostic", "list_diagnostics", "register_diagnostic",
           "unregister_diagnostic", "measure", "DiagnosticResult", "SpectralNormMeasurement", "EigenvaluesMeasurement",
           "LyapunovMeasurement", "ClusterMeasurement", "EnergyMeasurement", "RegimeMeasurement",
           "FixedPointsMeasurement", "HaltingMeasurement", "LoopDepthMeasurement", "FigureEntry", "LayerResult", "AttractorsMeasurement", "DepthSafetyMeasurement", "exit_rule_tradeoffs", "best_rule_by_compute"]
