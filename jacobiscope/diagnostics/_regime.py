"""The regime verdict (`jacobiscope.dynamics.Regime`) from what the other diagnostics measured."""
from __future__ import annotations

import math

from dataclasses import dataclass, field

from ._base import Diagnostic, MeasureContext
from ._result import DiagnosticResult, bad


@dataclass
class RegimeMeasurement(DiagnosticResult):
    """The verdict (a `jacobiscope.dynamics.Regime` value) and the numbers behind it.

    Example::

        >>> from jacobiscope.diagnostics import RegimeMeasurement
        >>> RegimeMeasurement("converging", {"lambda_late": -0.7}).columns()
        {'regime': 'converging'}
    """

    regime: str
    evidence: dict = field(default_factory=dict)

    headers = ("regime",)
    scalar_names = ("regime",)
    glossary = {"regime": ("-", "the verdict, by the rules of jacobiscope.classify_dynamics (calibration table in "
                                "the README).")}

    def columns(self) -> dict:
        return {"regime": str(self.regime)}

    def scalars(self) -> dict:
        return {"regime": self.regime}

    def problems(self, name: str) -> list[str]:
        from ..dynamics.regime import Regime

        regimes = tuple(regime.value for regime in Regime)
        problems = []
        if not isinstance(self.regime, str) or self.regime not in regimes:
            problems.append(bad("regime", self.regime, f"one of {', '.join(map(repr, regimes))}"))
        if not isinstance(self.evidence, dict):
            problems.append(bad("evidence", self.evidence, "an object"))
        return problems


def _first_nonfinite_derivative(norms, eigen, lyapunov) -> int | None:
    """The first loop at which a Jacobian measurement came out NaN/Inf, or None."""
    loops = [s["loop"] for s in (norms.samples if norms else []) if not math.isfinite(s["value"])]
    if eigen is not None and not all(math.isfinite(v) for pair in eigen.values for v in pair):
        loops.append(eigen.loop)
    if lyapunov is not None and lyapunov.history:
        # history[t] is the running estimate after the tangents went through the Jacobian at loop t
        loops += [t for t, row in enumerate(lyapunov.history) if not all(math.isfinite(v) for v in row)][:1]
    return min(loops) if loops else None


class Regime(Diagnostic):
    """`jacobiscope.classify_dynamics` on the running Lyapunov estimate, the trajectory (steps, returns, norms) and
    the Jacobian's eigenvalues and norm at the last finite state."""

    name = "regime"
    result_type = RegimeMeasurement
    always = True
    listed = True
    column_prefix = ""  # the historic DataFrame names (max_spectral_norm, lambda_max, ...)

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
        if context.nonfinite_loop < 0:
            loop = _first_nonfinite_derivative(norms, eigen, lyapunov)
            if loop is not None:
                # The states stayed finite but a derivative overflowed (a huge eta, an RMSNorm of an Inf sum that
                # returns 0): without a flag the row would show NaN numbers and a verdict with no reason given.
                context.flags.append(f"Jacobian NaN/Inf at loop {loop} (the states stay finite) — the results that "
                                     "use it are NaN; compute in float64 (dtype=torch.float64) or check the weights")
        return RegimeMeasurement(verdict.regime, dict(verdict.evidence))
