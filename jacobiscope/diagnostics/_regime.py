"""The regime verdict (`jacobiscope.dynamics.Regime`) from what the other diagnostics measured."""
from __future__ import annotations

import math

from dataclasses import dataclass, field

from .._values import _is_number, _num
from ._base import Diagnostic, MeasureContext
from ._result import DiagnosticResult, bad


#: The one lambda_max of every surface (summary table, verdict line, figures, JSON evidence ``lambda_late`` +/-
#: ``lambda_half_width``): the mean of the local exponents over the last half of the loops, with its 95% interval.
LAMBDA_HEADER = "lambda_max (late half, 95%)"


@dataclass
class RegimeMeasurement(DiagnosticResult):
    """The verdict (a `jacobiscope.dynamics.Regime` value) and the numbers behind it.

    Example::

        >>> from jacobiscope.diagnostics import RegimeMeasurement
        >>> RegimeMeasurement("converging", {"lambda_late": -0.7, "lambda_half_width": 0.01}).columns()
        {'lambda_max (late half, 95%)': '-0.7 +/- 0.01', 'regime': 'converging'}

    ``evidence["judged_on"]`` says which state the verdict read: ``"state"`` (the map's own), or
    ``"normalized state"`` (``x / rms(x)`` per token, when the state's norm grows with bounded steps: a pre-norm
    block); the regime cell then reads ``"converging (normalized)"``.
    """

    regime: str
    evidence: dict = field(default_factory=dict)

    headers = (LAMBDA_HEADER, "regime")
    scalar_names = ("regime", "lambda_max_late", "lambda_max_late_half_width", "judged_on")
    glossary = {
        LAMBDA_HEADER: ("nats per loop", "the largest Lyapunov exponent, as the verdict reads it: the mean of the "
                                         "local exponents over the last half of the loops (the transient dropped), "
                                         "+/- its 95% interval (batch means, Student t); < 0 contracting, 0 "
                                         "critical, > 0 chaotic. Of the normalized state when the regime says "
                                         "(normalized). The same number as the verdict line, the figures and the "
                                         "JSON evidence (lambda_late, lambda_half_width)."),
        "regime": ("-", "the verdict, by the rules of jacobiscope.classify_dynamics (calibration table in the "
                        "README); (normalized): judged on x/rms(x) per token, what the next norm sees, because the "
                        "state's norm grows with bounded steps (a pre-norm residual stream)."),
    }

    def columns(self) -> dict:
        evidence = self.evidence if isinstance(self.evidence, dict) else {}
        regime = str(self.regime)
        if evidence.get("judged_on") == "normalized state":
            regime += " (normalized)"
        return {LAMBDA_HEADER: lambda_cell(evidence), "regime": regime}

    def scalars(self) -> dict:
        # The DataFrame's lambda_max_late is the one lambda_max of the table, the verdict and the figures
        # (lambda_max / lambda_max_stderr there stay the whole-run exponent of the lyapunov diagnostic).
        evidence = self.evidence if isinstance(self.evidence, dict) else {}
        late, width = evidence.get("lambda_late"), evidence.get("lambda_half_width")
        return {"regime": self.regime, "lambda_max_late": late if _is_number(late) else None,
                "lambda_max_late_half_width": width if _is_number(width) else None,
                "judged_on": evidence.get("judged_on", "state" if evidence else None)}

    def problems(self, name: str) -> list[str]:
        from ..dynamics.regime import Regime

        regimes = tuple(regime.value for regime in Regime)
        problems = []
        if not isinstance(self.regime, str) or self.regime not in regimes:
            problems.append(bad("regime", self.regime, f"one of {', '.join(map(repr, regimes))}"))
        if not isinstance(self.evidence, dict):
            problems.append(bad("evidence", self.evidence, "an object"))
        return problems


def lambda_cell(evidence: dict) -> str | None:
    """``"-0.12 +/- 0.03"``: the verdict's lambda_max and 95% half-width, or None when none was measured."""
    late, width = evidence.get("lambda_late"), evidence.get("lambda_half_width")
    if not _is_number(late):
        return None
    exact = not math.isfinite(late)  # -inf: an annihilated tangent, exact
    return _num(late) if exact or not _is_number(width) else f"{_num(late)} +/- {_num(width, '.2g')}"


def _first_nonfinite_derivative(norms, eigen, lyapunov) -> int | None:
    """The first loop at which a Jacobian measurement came out NaN/Inf, or None."""
    loops = [s["loop"] for s in (norms.samples if norms else []) if not math.isfinite(s["value"])]
    if eigen is not None and not all(math.isfinite(v) for pair in eigen.values for v in pair):
        loops.append(eigen.loop)
    if lyapunov is not None and lyapunov.history:
        # history[t] is the running estimate after the tangents went through the Jacobian at loop t
        # (-inf is an exact exponent: a tangent the Jacobian annihilated, e.g. a constant or projecting map)
        loops += [t for t, row in enumerate(lyapunov.history) if any(math.isnan(v) or v == math.inf for v in row)][:1]
    return min(loops) if loops else None


class Regime(Diagnostic):
    """`jacobiscope.classify_dynamics` on the running Lyapunov estimate, the trajectory (steps, returns, norms) and
    the Jacobian's eigenvalues and norm at the last finite state."""

    name = "regime"
    description = "the verdict: converging / critical / chaotic / diverging, from the numbers"
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
        if verdict.evidence.get("rest_on_repeller"):
            # a report's verdict column says "converging"; the flag keeps the caveat beside it in every table
            what = "cycle" if verdict.evidence.get("period") else "fixed point"
            context.flags.append(f"rests on a repelling {what} (rho(J) = {verdict.evidence['spectral_radius']:.3g}), "
                                 "reached exactly: a perturbation grows; see the regime's reason")
        evidence = dict(verdict.evidence)
        evidence["judged_on"] = "state"
        judged = _on_normalized_state(context, verdict, lyapunov, eigen, norms)
        if judged is not None:
            return RegimeMeasurement(judged.regime, dict(judged.evidence))
        return RegimeMeasurement(verdict.regime, evidence)


def _on_normalized_state(context: MeasureContext, verdict, lyapunov, eigen, norms):
    """The verdict judged on the normalized state when the residual grows with bounded steps (a pre-norm block),
    or None when the state itself is the one to judge (or the normalized measurement failed: said in a flag)."""
    from ..dynamics._normalized import residual_growth
    from ..dynamics._normalized_verdict import normalized_verdict

    if context.nonfinite_loop >= 0 or context.last_finite < 8:
        return None
    states = context.states[: context.last_finite + 1]
    growth = residual_growth(states)
    if growth is None or not growth.bounded_growth:
        return None
    options = context.options
    try:
        return normalized_verdict(
            context.looped, states, verdict, growth, k=min(options.get("k", 4), 4) if lyapunov else 0,
            eigen_k=options.get("eigen_k", 4) if eigen and eigen.loop == context.last_finite else 0,
            eigen_restarts=options.get("eigen_restarts", 4),
            # ||J|| of the normalized map at the last state only: the number the verdict cites (one Lanczos run)
            norm_loops=[context.last_finite] if norms else [],
            seed=options.get("seed", 0))
    except (RuntimeError, NotImplementedError, ValueError) as error:
        context.flags.append(f"the residual grows with bounded steps, but the normalized state could not be measured "
                             f"({type(error).__name__}: {str(error).splitlines()[0][:120]}) — the verdict reads the "
                             "raw state; compute in float64 (dtype=torch.float64) or report the error")
        return None
