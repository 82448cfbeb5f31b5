"""The regime verdict (`jacobiscope.dynamics.Regime`) from what the other diagnostics measured."""
from __future__ import annotations

from ._base import Diagnostic, MeasureContext
from ._results import RegimeMeasurement


class Regime(Diagnostic):
    """`jacobiscope.classify_dynamics` on the running Lyapunov estimate, the trajectory (steps, returns, norms) and
    the Jacobian's eigenvalues and norm at the last finite state."""

    name = "regime"
    result_type = RegimeMeasurement
    always = True

    def compute(self, context: MeasureContext):
        from ..dynamics.regime import classify_dynamics

        lyapunov = context.results.get("lyapunov")
        eigen = context.results.get("eigenvalues")
        norms = context.results.get("spectral_norm")
        last = context.last_finite
        final_norm = [s["value"] for s in (norms.samples if norms else []) if s["loop"] == last]
        verdict = classify_dynamics(
            lyapunov_history=[step[0] for step in lyapunov.history] if lyapunov and lyapunov.history else None,
            max_lyapunov=lyapunov.max if lyapunov else None,
            max_lyapunov_stderr=lyapunov.max_stderr if lyapunov else None,
            states=context.states[: last + 1] if last >= 1 else None,
            nonfinite_step=context.nonfinite_loop if context.nonfinite_loop >= 0 else None,
            eigenvalues=eigen.complex_values if eigen and eigen.loop == last else None,
            spectral_norm=final_norm[0] if final_norm else None,
        )
        return RegimeMeasurement(verdict.regime, dict(verdict.evidence))

    def fields(self, result) -> dict:
        return {"regime": result.regime, "evidence": result.evidence}

    def from_row(self, row):
        return RegimeMeasurement(row.regime, row.evidence)

    headers = ("regime",)

    def cells(self, scalars: dict) -> list[str]:
        return [str(scalars["regime"])]


