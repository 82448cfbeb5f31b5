"""The Jacobian's top eigenvalues at the last finite loop, and their oscillation measures."""
from __future__ import annotations

import warnings

from ..errors import ConvergenceWarning
from ._base import Diagnostic, MeasureContext
from ._results import EigenvaluesMeasurement

OSCILLATION_KEYS = ("spectral_radius", "complex_fraction", "max_imag", "max_rotation_angle", "mean_rotation_angle",
                    "outside_unit_circle_fraction")


class Eigenvalues(Diagnostic):
    """The ``eigen_k`` eigenvalues of largest modulus (restarted Arnoldi on jvps), with the spectral radius, the
    complex (oscillatory) share and rotation angles; a row is flagged when Arnoldi's residual exceeds 0.05."""

    name = "eigenvalues"
    result_type = EigenvaluesMeasurement

    def cost(self, state_size, loops, options):
        # the Krylov basis plus up to eigen_restarts restarts: ~110-140 jvps measured (GPT-2, BERT, ItrSA blocks)
        basis = max(2 * options.get("eigen_k", 4) + 1, options.get("eigen_k", 4) + 20)
        return {"jvp": min(basis * (1 + options.get("eigen_restarts", 4)), 30 * basis)}

    def compute(self, context: MeasureContext):
        from ..dynamics.oscillation import oscillation_measures
        from ..linalg.eig import jacobian_eigenvalues

        loop = context.last_finite
        count = min(context.options.get("eigen_k", 4), context.state_size)
        with warnings.catch_warnings():
            # A capped Arnoldi run is the default here; its residuals are reported instead of a warning.
            warnings.simplefilter("ignore", ConvergenceWarning)
            result = jacobian_eigenvalues(context.looped, context.states[loop : loop + 1], k=count, tol=1e-3,
                                          max_restarts=context.options.get("eigen_restarts", 4),
                                          seed=context.options.get("seed", 0))
        values = result.values[0]
        max_residual = float(result.residuals.max()) if result.residuals is not None else 0.0
        if max_residual > 0.05:
            context.flags.append(f"eigenvalues inaccurate (residual {max_residual:.2g}; raise eigen_restarts)")
        measures = oscillation_measures(values)
        oscillation = {key: float(getattr(measures, key)) for key in OSCILLATION_KEYS}
        oscillation["max_residual"] = max_residual
        return EigenvaluesMeasurement(loop=loop, values=[[float(v.real), float(v.imag)] for v in values],
                                 oscillation=oscillation)

    def fields(self, result) -> dict:
        return {"eigenvalues": result.values, "eigen_loop": result.loop, "oscillation": result.oscillation}

    def from_row(self, row):
        if row.eigenvalues is None:
            return None
        return EigenvaluesMeasurement(loop=row.eigen_loop, values=row.eigenvalues, oscillation=row.oscillation or {})

    headers = ("rho(J)", "complex")

    def cells(self, scalars: dict) -> list[str]:
        import math

        from ..report._text import _num
        from ..report._values import _is_number

        share = scalars["complex_fraction"]
        complex_cell = f"{100 * share:.0f}%" if _is_number(share) and math.isfinite(share) else _num(share)
        return [_num(scalars["spectral_radius"], ".4g"), complex_cell]

    figure_name = "eigenvalues"

    def figure(self, rows, labels):
        """The report's "eigenvalues" figure over ``rows``."""
        from ..report._plots import _labels_and_colors, _new_figure, _plot_eigenvalues

        return _plot_eigenvalues(_new_figure, rows, labels, _labels_and_colors(rows)[1])
