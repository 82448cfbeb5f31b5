"""The regime verdict — converging / critical / chaotic / oscillating / diverging — from what was measured."""
from __future__ import annotations


from ..dynamics.regime import Regime as Verdict
from ._base import Diagnostic, MeasureContext
from ._results import RegimeMeasurement


class Regime(Diagnostic):
    """`jacobiscope.classify_dynamics` on the Lyapunov exponent, step sizes, state norms, eigenvalues and the
    trajectory; ``unknown`` (with the reason) when the exponent was not measured and nothing diverged."""

    name = "regime"
    result_type = RegimeMeasurement
    always = True

    def compute(self, context: MeasureContext):
        from ..dynamics.regime import classify_dynamics

        lyapunov = context.results.get("lyapunov")
        if lyapunov is None and context.nonfinite_loop < 0:
            return RegimeMeasurement(Verdict.UNKNOWN.value,
                                {"reason": "the verdict needs the Lyapunov exponent: add 'lyapunov' to diagnostics"})
        import torch

        eigen = context.results.get("eigenvalues")
        last = context.last_finite
        verdict = classify_dynamics(
            max_lyapunov=lyapunov.max if lyapunov else float("nan"),
            max_lyapunov_stderr=lyapunov.max_stderr if lyapunov else float("nan"),
            step_sizes=torch.tensor(context.step_size[:last]) if last > 0 else None,
            state_norms=torch.tensor(context.state_norm[: last + 1]),
            nonfinite_step=context.nonfinite_loop if context.nonfinite_loop >= 0 else None,
            oscillation=eigen.oscillation if eigen else None,
            states=context.states[: last + 1],
        )
        return RegimeMeasurement(Verdict(verdict.regime).value, dict(verdict.evidence, reason=verdict.reason))

    def fields(self, result) -> dict:
        return {"regime": result.regime, "evidence": result.evidence}

    def from_row(self, row):
        return RegimeMeasurement(row.regime, row.evidence)

    headers = ("regime",)

    def cells(self, scalars: dict) -> list[str]:
        return [str(scalars["regime"])]


