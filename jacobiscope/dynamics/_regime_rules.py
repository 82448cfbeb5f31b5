"""The rules of `jacobiscope.classify_dynamics`, in order; each returns a verdict or None (the next rule decides)."""
from __future__ import annotations

import math

import torch

from . import _regime_evidence as measured
from ._regime_types import Regime, RegimeThresholds, RegimeVerdict, _Observed

def _rule_diverging(seen: _Observed, limits: RegimeThresholds):
    if seen.nonfinite_step >= 0:
        seen.evidence["nonfinite_step"] = seen.nonfinite_step
        return _verdict(Regime.DIVERGING, seen, f"the trajectory became NaN/Inf at loop {seen.nonfinite_step}")
    for name, values in (("states", seen.trajectory), ("step sizes", seen.steps), ("state norms", seen.norms)):
        if values is not None and not bool(torch.isfinite(values).all()):
            return _verdict(Regime.DIVERGING, seen, f"the {name} contain NaN/Inf: the trajectory blew up")
    if seen.estimate is not None and (math.isnan(seen.estimate.value) or seen.estimate.value == math.inf):
        return _verdict(Regime.DIVERGING, seen, f"the exponent is {seen.estimate.value}: the trajectory went "
                        "non-finite (lyapunov_spectrum marks such trajectories with NaN)")
    if seen.norms is None or seen.norms.numel() < 4:
        return None
    growth = measured.norm_growth(seen.norms)
    seen.evidence.update(growth)
    if growth["norm_growth"] > limits.divergence_ratio:
        return _verdict(Regime.DIVERGING, seen, f"the norm grew {growth['norm_growth']:.3g}x from the first half of "
                        f"the trajectory to the second (> {limits.divergence_ratio:g})")
    # A bounded (normalized) stream can creep upwards for a few loops; steady growth must also be large.
    if (growth["norm_log_rate"] > limits.growth_rate and growth["norm_rising_fraction"] >= limits.growth_fraction
            and growth["norm_last_half_growth"] >= 1.5):
        return _verdict(Regime.DIVERGING, seen, f"the norm grows steadily at {growth['norm_log_rate']:.3g} "
                        f"nats/loop (rising in {growth['norm_rising_fraction']:.0%} of the last half's loops)")
    return None


def _rule_fixed_point(seen: _Observed, limits: RegimeThresholds):
    if seen.steps is None or seen.steps.numel() < 4:
        return None
    steps = measured.step_evidence(seen.steps)
    seen.evidence.update(step_largest=steps.largest, step_late=steps.late, step_decay_ratio=steps.ratio,
                         step_log_rate=steps.log_rate)
    estimate = seen.estimate
    unstable = seen.spectral_radius is not None and seen.spectral_radius > limits.fixed_point_radius
    if steps.collapsed(limits.decay_ratio):
        seen.evidence["steps_decay"] = True
        if estimate is not None and _critical(estimate, limits):
            return _verdict(Regime.CRITICAL, seen, f"{_exponent_text(seen)} is 0 within {limits.tol:g} while the "
                            "steps decay: a marginally stable fixed point")
        if unstable and steps.late > 0:
            return _unstable_fixed_point(seen, limits, f"the steps fell to {steps.ratio:.2g} of the largest")
        if unstable:
            return _exact_rest_on_repeller(seen)
        return _verdict(Regime.CONVERGING, seen, f"the steps fell to {steps.ratio:.2g} of the largest: a fixed point"
                        f"{'; ' + _exponent_text(seen) if estimate is not None else ''}")
    shrinking = steps.shrinking()
    seen.evidence["steps_decay"] = shrinking
    if shrinking and (estimate is None and steps.log_rate < -limits.tol or estimate is not None and
                      estimate.high < 0):
        if unstable:
            return _unstable_fixed_point(seen, limits, f"the steps shrink by {-steps.log_rate:.3g} nats/loop")
        what = _exponent_text(seen) if estimate is not None else "no exponent measured"
        return _verdict(Regime.CONVERGING, seen, f"the steps shrink by {-steps.log_rate:.3g} nats/loop and {what}: "
                        "approaching a fixed point")
    return None


def _unstable_fixed_point(seen: _Observed, limits: RegimeThresholds, observed: str) -> RegimeVerdict:
    """The steps say "fixed point" but the Jacobian there has an eigenvalue outside the unit circle: the state it
    approaches repels along that direction, so the orbit will leave it (often for a period-2 orbit)."""
    loops = seen.steps.numel()
    seen.evidence["loops_needed"] = _loops_needed(loops, 2.0)
    return _verdict(Regime.UNDETERMINED, seen, f"{observed}, but rho(J) = {seen.spectral_radius:.3g} > 1 at the last "
                    f"state: the point it approaches is unstable; {_exponent_text(seen)}; run about "
                    f"{seen.evidence['loops_needed']} loops")


def _exact_rest_on_repeller(seen: _Observed) -> RegimeVerdict:
    """The steps fell to exactly 0 on a point where the Jacobian has an eigenvalue outside the unit circle. The loop
    does rest there — the same input gives the same output forever — but only because the state landed on the point
    exactly: floating-point rounding (a map that shifts binary digits, as the doubling or tent map does, empties a
    float64 state in about 53 loops) or a start on the point's stable set. Any perturbation grows by rho(J) per loop,
    so the verdict says so instead of calling the point an attractor."""
    seen.evidence["rest_on_repeller"] = True
    exponent = f"; {_exponent_text(seen)}" if seen.estimate is not None else ""
    return _verdict(Regime.CONVERGING, seen, f"the steps fell to exactly 0: the state rests on a fixed point, but "
                    f"rho(J) = {seen.spectral_radius:.3g} > 1 there — it repels, and the loop stays only because it "
                    "landed on it exactly (rounding, e.g. a map that shifts binary digits, or a start on its stable "
                    f"set); a perturbation grows about {seen.spectral_radius:.3g}x per loop{exponent}")


def _rule_periodic(seen: _Observed, limits: RegimeThresholds):
    seen.evidence["period"] = 0
    if seen.trajectory is None or limits.max_period < 2:
        return None
    returns = measured.return_evidence(seen.trajectory, limits.max_period, limits.period_rtol, seen.eps)
    seen.evidence["periods_checked"] = returns.checked
    if returns.closest:
        seen.evidence.update(closest_return=returns.closest, return_residual=returns.closest_residual)
    if not returns.period:
        return None
    seen.evidence["period"] = returns.period
    text = f"; {_exponent_text(seen)}" if seen.estimate is not None else ""
    estimate = seen.estimate
    if estimate is not None and estimate.low > 0 and estimate.low * max(estimate.last_loop, 1) >= 1:
        # a cycle whose tangents grow (by more than one e-fold over the run, so not a neutral drift on a norm
        # sphere): it repels, and the loop keeps it only because it landed on it exactly (as in
        # `_exact_rest_on_repeller`); a perturbation leaves it
        seen.evidence["rest_on_repeller"] = True
        text += (": a repelling cycle, kept only because the state landed on it exactly (rounding or a start on "
                 "its stable set); a perturbation leaves it")
    return _verdict(Regime.PERIODIC, seen, f"the orbit repeats with period {returns.period} (returns within "
                    f"{returns.closest_residual:.2g} of a step){text}")


def _rule_transient(seen: _Observed, limits: RegimeThresholds):
    estimate = seen.estimate
    if estimate is None or estimate.drift <= max(limits.drift_tol, estimate.half_width):
        return None
    needed = _loops_needed(estimate.last_loop, estimate.drift / max(limits.drift_tol, estimate.half_width))
    seen.evidence["loops_needed"] = needed
    return _verdict(Regime.UNDETERMINED, seen, f"{_exponent_text(seen)}, but the whole-run estimate is "
                    f"{estimate.whole:.3g} (drift {estimate.drift:.2g}): still in a transient; run about {needed} loops")


def _rule_exponent(seen: _Observed, limits: RegimeThresholds):
    estimate = seen.estimate
    if estimate is None:
        return None
    text = _exponent_text(seen)
    if estimate.value == -math.inf:
        return _verdict(Regime.CONVERGING, seen, f"{text}: the Jacobians annihilate every tangent direction "
                        "(superstable): nearby states merge in finitely many loops")
    in_band = abs(estimate.value) <= limits.tol and estimate.half_width <= limits.max_half_width
    turning = _quasi_periodic(seen, limits) if in_band else ""
    if turning:
        return _verdict(Regime.OSCILLATING, seen, f"{text} is within {limits.tol:g} of 0, no period, and {turning}: "
                        "quasi-periodic")
    if _critical(estimate, limits):
        return _verdict(Regime.CRITICAL, seen, f"{text} is 0 within {limits.tol:g}, bounded, no period")
    if estimate.low > 0:
        if _still_growing(seen, limits):
            seen.evidence["loops_needed"] = _loops_needed(estimate.last_loop, 2.0)
            return _verdict(Regime.UNDETERMINED, seen, f"{text} > 0, but the norm still rises steadily "
                            f"({seen.evidence['norm_log_rate']:.3g} nats/loop): chaos or divergence? run about "
                            f"{seen.evidence['loops_needed']} loops")
        separation = estimate.high * estimate.last_loop
        if estimate.last_loop and separation < 1 and estimate.high <= limits.tol:
            # a significant but tiny exponent (2e-4 +/- 3e-6 over 32 loops): nearby states have not parted by one
            # e-fold in the whole run — neutral drift (a set of near-fixed points), not chaos
            return _verdict(Regime.CRITICAL, seen, f"{text} is above 0, but nearby states part by at most "
                            f"e^{separation:.2g} over the {estimate.last_loop} loops (under one e-fold), bounded, no "
                            "period: neutral, at the edge of stability")
        return _verdict(Regime.CHAOTIC, seen, f"{text} > 0 with a bounded norm and no period")
    if estimate.high < 0:
        seen.evidence["loops_needed"] = _loops_needed(estimate.last_loop, 2.0)
        return _verdict(Regime.UNDETERMINED, seen, f"{text} < 0, but the steps persist and no period <= "
                        f"{limits.max_period} closes: still approaching an orbit (or a longer period); run about "
                        f"{seen.evidence['loops_needed']} loops")
    needed = _loops_needed(estimate.last_loop, _interval_factor(estimate, limits))
    seen.evidence["loops_needed"] = needed
    return _verdict(Regime.UNDETERMINED, seen, f"{text}: the interval is too wide to tell critical from "
                    f"{'chaotic' if estimate.value > 0 else 'contracting'}; run about {needed} loops")


# ---------------------------------------------------------------------------------------------------- helpers
def _quasi_periodic(seen: _Observed, limits: RegimeThresholds) -> str:
    """Why the orbit counts as turning (a sentence), or "" — from the orbit itself (a steady turn in its main plane)
    or from the Jacobian (a dominant complex eigenvalue pair on the unit circle)."""
    turn = measured.rotation_evidence(seen.trajectory) if seen.trajectory is not None else None
    if turn is not None:
        seen.evidence.update(turn_angle_per_loop=turn.angle_per_loop, turn_plane_share=turn.plane_share,
                             turn_same_sense=turn.same_sense, turn_radius_spread=turn.radius_spread)
        if turn.rotating():
            return (f"the late orbit turns {abs(turn.angle_per_loop):.3g} rad per loop in a plane holding "
                    f"{turn.plane_share:.0%} of its motion")
    pair = measured.unit_circle_pair(seen.eigenvalues or [], limits.unit_circle_tol)
    if pair is None:
        return ""
    angle = abs(math.atan2(pair.imag, pair.real))
    seen.evidence["rotation_angle"] = angle
    return f"J's dominant eigenvalues {abs(pair):.4g} e^(+-{angle:.3g}i) lie on the unit circle"


def _still_growing(seen: _Observed, limits: RegimeThresholds) -> bool:
    """The norm rises in nearly every loop at a real rate, though not yet by enough to call it divergence."""
    return (seen.evidence.get("norm_rising_fraction", 0.0) >= limits.growth_fraction
            and seen.evidence.get("norm_log_rate", 0.0) > limits.growth_rate)


def _critical(estimate, limits) -> bool:
    return (estimate.low <= 0 <= estimate.high and abs(estimate.value) <= limits.tol
            and estimate.half_width <= limits.max_half_width)


def _interval_factor(estimate, limits) -> float:
    """How much the half-width must shrink to decide: to fit the band [-tol, tol], or to exclude 0."""
    to_band = estimate.half_width / limits.max_half_width if abs(estimate.value) <= limits.tol else math.inf
    to_sign = estimate.half_width / abs(estimate.value) if estimate.value != 0 else math.inf
    return min(to_band, to_sign)


def _loops_needed(loops: int, factor: float) -> int:
    """Loops that shrink an interval by ``factor`` (it narrows like 1/sqrt(loops)), rounded up to a power of 2."""
    if loops <= 0:
        return 0
    wanted = loops * min(max(factor, 1.0), 64.0) ** 2
    return int(2 ** math.ceil(math.log2(max(wanted, 2 * loops))))


def _exponent_text(seen: _Observed) -> str:
    estimate = seen.estimate
    if estimate is None:
        return "lambda_max not measured"
    where = f" over loops {estimate.first_loop}-{estimate.last_loop}" if estimate.last_loop else ""
    if estimate.value == -math.inf:
        return f"lambda_max = -inf (exact){where}"
    width = f" +/- {estimate.half_width:.2g}" if math.isfinite(estimate.half_width) else ""
    # lambda_max only: a sentence goes on to say what it is ("is 0 within 0.1", "> 0"), so nothing may stand
    # between the number and that claim (rho(J) once did: "rho(J) = 1.32 is 0 within 0.1"); rho(J) is added last
    return f"lambda_max = {estimate.value:.3g}{width} (95%){where}"


def _verdict(regime: Regime, seen: _Observed, reason: str) -> RegimeVerdict:
    if seen.spectral_radius is not None and "rho(J)" not in reason:
        reason += f"; rho(J) = {seen.spectral_radius:.3g} at the last state"
    seen.evidence["reason"] = reason
    seen.evidence.setdefault("period", 0)
    return RegimeVerdict(regime=Regime(regime).value, evidence=seen.evidence)
