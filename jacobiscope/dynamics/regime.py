"""Regime of a looped map from its measurements, with statistics and thresholds calibrated on known systems.

Example::

    >>> import jacobiscope
    >>> row = jacobiscope.measure(jacobiscope.systems.logistic_map(3.2), loops=64, diagnostics=["lyapunov"], k=1)
    >>> row.regime, row.evidence["period"]
    ('periodic', 2)

The verdict reads one trajectory of ``X_{t+1} = F(X_t)``: the running estimate of the largest Lyapunov exponent
(its late-half value, a 95% confidence interval and the drift from the whole-run value), the step sizes
``||X_{t+1} - X_t||``, the return distances ``||X_{t+p} - X_t||``, the state norms and the Jacobian's eigenvalues at
the last state. The rules and the calibration table that set every threshold are in `classify_dynamics`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from enum import Enum

import torch

from ..errors import ArgumentError
from . import _regime_evidence as measured

__all__ = ["Regime", "REGIMES", "RegimeThresholds", "RegimeVerdict", "classify_dynamics"]


class Regime(str, Enum):
    """The one vocabulary of verdicts, used by the classifier, the diagnostics, reports and the CLI.

    Example::

        >>> from jacobiscope.dynamics.regime import Regime
        >>> Regime("periodic") is Regime.PERIODIC, Regime.CRITICAL == "critical"
        (True, True)

    A `str` enum: a verdict compares equal to its plain name and JSON holds the name.

    - ``converging``: to a fixed point (the steps collapse, or shrink exponentially while lambda_max < 0).
    - ``periodic``: a period-p orbit, p >= 2 (``evidence["period"]``), attracting or neutral.
    - ``critical``: lambda_max = 0 within the tolerance and its 95% interval, no period, bounded.
    - ``chaotic``: lambda_max > 0 (its whole 95% interval), bounded, no period.
    - ``oscillating``: quasi-periodic: lambda_max ~ 0 with a complex Jacobian eigenvalue on the unit circle.
    - ``diverging``: NaN/Inf, or the norm grows without bound.
    - ``undetermined``: the measurements do not decide yet; ``evidence["loops_needed"]`` says how many loops would.
    - ``unknown``: not classified (no exponent measured and nothing observed that decides).
    """

    CONVERGING = "converging"
    PERIODIC = "periodic"
    CRITICAL = "critical"
    CHAOTIC = "chaotic"
    OSCILLATING = "oscillating"
    DIVERGING = "diverging"
    UNDETERMINED = "undetermined"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


#: The verdicts `classify_dynamics` reaches (every `Regime` but ``unknown``).
REGIMES = tuple(regime.value for regime in Regime if regime is not Regime.UNKNOWN)


@dataclass(frozen=True)
class RegimeThresholds:
    """Every threshold of `classify_dynamics`, with the calibrated defaults (see its calibration table).

    Attributes:
        tol: the critical band (nats per loop): ``critical`` needs the late estimate of lambda_max within ``tol``
            of 0 and its 95% interval around 0. The paper's best looped models sit at 0 to +0.1; the calibration
            maps that are not critical sit at |lambda| >= 0.42 or are decided by their orbits (fixed point, period).
        max_half_width: the interval's half-width must be at most this for ``critical``: a wider interval is
            ``undetermined`` (a short run of a chaotic map can have a small estimate and a huge interval).
        drift_tol: the late-half estimate may differ from the whole-run estimate by this much (or by its own
            interval) before the run counts as still in its transient.
        decay_ratio: the steps have collapsed (a fixed point is reached) when the late step is below
            ``decay_ratio`` times the largest.
        max_period, period_rtol: periods ``2..max_period`` are searched; ``p`` closes when
            ``max ||X_{t+p} - X_t||`` over the last quarter is below ``period_rtol`` times the median step there
            (plus a rounding floor of ``100 eps ||X||`` in the states' own precision).
        unit_circle_tol: ``oscillating`` needs a complex eigenvalue among the dominant ones (within 1% of the
            spectral radius) with ``|ln|mu|| <= unit_circle_tol`` (the critical band, as a modulus).
        fixed_point_radius: a fixed point is only believed when the Jacobian's spectral radius at the last state is
            at most this (when eigenvalues were measured): above 1 the point repels (1% margin for Arnoldi).
        divergence_ratio, growth_fraction, growth_rate: diverging when the second half's largest norm exceeds the
            first half's by ``divergence_ratio``, or when the norm grows at more than ``growth_rate`` nats per
            loop over the last quarter, in at least ``growth_fraction`` of the last half's loops, by 1.5x or more.
        resolution: the smallest standard error believed (rounding of the log-norms), nats per loop.
    """

    tol: float = 0.1
    max_half_width: float = 0.2
    drift_tol: float = 0.05
    decay_ratio: float = 1e-3
    max_period: int = 16
    period_rtol: float = 1e-3
    unit_circle_tol: float = 0.1
    fixed_point_radius: float = 1.01
    divergence_ratio: float = 1e3
    growth_fraction: float = 0.9
    growth_rate: float = 0.01
    resolution: float = 1e-6

    def checked(self) -> "RegimeThresholds":
        for name in ("tol", "max_half_width", "drift_tol", "fixed_point_radius", "period_rtol", "unit_circle_tol", "growth_rate", "resolution"):
            measured.require_number(getattr(self, name), name, minimum=0.0)
        measured.require_number(self.divergence_ratio, "divergence_ratio", minimum=1.0)
        measured.require_number(self.growth_fraction, "growth_fraction", minimum=0.0, maximum=1.0)
        measured.require_number(self.decay_ratio, "decay_ratio", minimum=0.0, maximum=1.0)
        if isinstance(self.max_period, bool) or not isinstance(self.max_period, int) or self.max_period < 0:
            raise ArgumentError(f"max_period must be a non-negative int (0 disables the period search), got "
                                f"{self.max_period!r}.")
        return self


@dataclass
class RegimeVerdict:
    """What `classify_dynamics` returns.

    Attributes:
        regime: a `Regime` value (``"converging"``, ``"periodic"``, ...).
        evidence: the numbers behind the verdict as plain ``float`` / ``int`` / ``bool`` / ``str`` (JSON-ready;
            what could not be measured is absent), including ``reason``: one sentence a person can check.
    """

    regime: str
    evidence: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return self.evidence.get("reason", "")

    @property
    def period(self) -> int:
        """The orbit's period for ``periodic`` verdicts, else 0."""
        return int(self.evidence.get("period", 0))

    def as_dict(self) -> dict:
        """``{"regime": ..., "reason": ..., "evidence": {...}}`` with plain Python values."""
        return {"regime": self.regime, "reason": self.reason, "evidence": dict(self.evidence)}


@dataclass
class _Observed:
    """Everything measured, gathered once for the rules."""

    estimate: measured.ExponentEstimate | None
    trajectory: torch.Tensor | None
    steps: torch.Tensor | None
    norms: torch.Tensor | None
    eps: float
    nonfinite_step: int
    eigenvalues: list | None
    spectral_radius: float | None
    evidence: dict


def classify_dynamics(*, max_lyapunov=None, max_lyapunov_stderr=None, lyapunov_history=None, states=None,
                      step_sizes=None, state_norms=None, nonfinite_step=None, eigenvalues=None, oscillation=None,
                      spectral_norm=None, thresholds: RegimeThresholds | None = None, **overrides) -> RegimeVerdict:
    """Classify one trajectory of a looped map (discrete time).

    Example::

        >>> import jacobiscope
        >>> from jacobiscope.dynamics.regime import classify_dynamics
        >>> m = jacobiscope.systems.logistic_map(4.0)
        >>> lyap = jacobiscope.lyapunov_spectrum(m, m.x0, steps=256)
        >>> verdict = classify_dynamics(lyapunov_history=lyap.history[:, 0], states=m.trajectory(m.x0, 256))
        >>> verdict.regime, round(verdict.evidence["lambda_late"], 2)
        ('chaotic', 0.69)

    Signature: ``classify_dynamics(*, max_lyapunov=None, max_lyapunov_stderr=None, lyapunov_history=None,
    states=None, step_sizes=None, state_norms=None, nonfinite_step=None, eigenvalues=None, oscillation=None,
    spectral_norm=None, thresholds=None, **overrides)``

    Arguments:
        lyapunov_history: running estimates of the largest exponent, one per loop (``lyap.history[:, 0]``,
            reorth_every=1). Preferred: the estimate is then taken over the last half of the loops (the transient
            discarded) with a batch-means 95% interval, and compared with the whole run (``drift``).
        max_lyapunov, max_lyapunov_stderr: the exponent and its standard error, when no history is given.
        states: the trajectory ``[T, *state]``: steps, norms and return distances (periods) are read from it.
        step_sizes, state_norms: absolute ``||X_{t+1} - X_t||`` and ``||X_t||`` series, when no states are given.
        nonfinite_step: the loop at which the trajectory became NaN/Inf, or -1.
        eigenvalues: the Jacobian's top eigenvalues at the last state (complex, or ``[re, im]`` pairs): needed
            for ``oscillating``; ``oscillation``: their `OscillationMeasures` (spectral radius as evidence).
        spectral_norm: ``||J||_2`` at the last state (evidence).
        thresholds: a `RegimeThresholds`; ``overrides`` replace single fields (``tol=0.05``).

    Returns:
        `RegimeVerdict`.

    Rules, in order (first match wins); "the interval" is the 95% interval of lambda_max:

    1. **diverging**: NaN/Inf anywhere, or the norm grows without bound (`RegimeThresholds`).
    2. **converging**: the steps collapsed (late step <= ``decay_ratio`` x largest), unless lambda_max is
       critical (rule 5: then a marginally stable fixed point, ``critical``); or the steps shrink exponentially
       (a significantly negative log-slope) while the interval is below 0. Either way **undetermined** instead when
       the Jacobian's spectral radius at the last state exceeds ``fixed_point_radius`` (an unstable point).
    3. **periodic**: a period ``p`` in ``2..max_period`` closes (``period_rtol``).
    4. **undetermined** when lambda_max was measured but the run is still in its transient (drift above
       ``drift_tol`` and above the interval's half-width).
    5. estimate within ``tol`` of 0 and interval at most ``max_half_width`` wide: **oscillating** when the motion
       is quasi-periodic (the late orbit turns steadily in a plane: `RotationEvidence.rotating`; or a dominant
       Jacobian eigenvalue pair lies on the unit circle, ``unit_circle_tol``); otherwise **critical** when the
       interval contains 0.
    6. interval above 0: **chaotic** (bounded, no period); **undetermined** while the norm still rises steadily
       (the growth rules of 1 not yet met: chaos and divergence cannot be told apart yet).
    7. interval below 0 with persistent steps and no period: **undetermined** (still approaching an orbit).
    8. otherwise (an interval too wide to decide): **undetermined**; ``loops_needed`` estimates the loops that
       would decide it (the interval shrinks like 1 / sqrt(loops)).
    Without any exponent, rules 1-3 still decide; otherwise the verdict is ``unknown``.

    Calibration (tests/test_dynamics_regime.py runs every row at 64 and 256 loops from the maps' own ``x0``):

    ==============================================  ==============  =====================================
    system                                          expected        lambda_max (exact or reference)
    ==============================================  ==============  =====================================
    logistic r = 3.2                                periodic, p=2   ln(0.16)/2 = -0.916
    logistic r = 3.5                                periodic, p=4   -0.873
    logistic r = 3.5699456 (Feigenbaum point)       critical        0 (the estimate creeps to 0)
    logistic r = 3.9                                chaotic         0.49 (long-run)
    logistic r = 4                                  chaotic         ln 2 = 0.693
    Hénon a = 1.4, b = 0.3                          chaotic         0.419
    x -> diag(0.5, 0.3) x                           converging      ln 0.5
    x -> diag(0.97, 0.3) x (slow contraction)       converging      ln 0.97
    rotation by 2 pi / phi (irrational)             oscillating     0 (eigenvalues on the unit circle)
    rotation by 2 pi / 5                            periodic, p=5   0
    x -> diag(1.05, 0.5) x                          diverging       ln 1.05
    ItrSA-form random map, weight scale 0.5 .. 8    oscillating     ~0 (the normalized state turns steadily)
    ==============================================  ==============  =====================================

    Short runs answer ``undetermined`` instead (e.g. the Feigenbaum point at 64 loops, Hénon at 32).

    References: Tomihari & Karakida, NeurIPS 2025 (criticality of looped transformers: lambda_max near 0);
    J.-P. Eckmann & D. Ruelle, Ergodic theory of chaos and strange attractors, Rev. Mod. Phys. 57 (1985);
    M. J. Feigenbaum, J. Stat. Phys. 19 (1978).
    """
    limits = _thresholds(thresholds, overrides)
    observed = _observe(max_lyapunov, max_lyapunov_stderr, lyapunov_history, states, step_sizes, state_norms,
                        nonfinite_step, eigenvalues, oscillation, spectral_norm, limits)
    for rule in (_rule_diverging, _rule_fixed_point, _rule_periodic, _rule_transient, _rule_exponent):
        verdict = rule(observed, limits)
        if verdict is not None:
            return verdict
    return _verdict(Regime.UNKNOWN, observed, "no Lyapunov exponent was measured and the orbit neither diverged, "
                    "settled nor repeated: measure 'lyapunov' for a verdict")


# ---------------------------------------------------------------------------------------------------- gathering
def _thresholds(thresholds, overrides) -> RegimeThresholds:
    base = RegimeThresholds() if thresholds is None else thresholds
    if not isinstance(base, RegimeThresholds):
        raise ArgumentError(f"thresholds must be a RegimeThresholds, got {type(base).__name__}.")
    names = {f.name for f in fields(RegimeThresholds)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ArgumentError(f"classify_dynamics got unknown keyword(s) {unknown}; thresholds are {sorted(names)}.")
    return replace(base, **overrides).checked()


def _observe(max_lyapunov, max_lyapunov_stderr, history, states, step_sizes, state_norms, nonfinite_step,
             eigenvalues, oscillation, spectral_norm, limits) -> _Observed:
    evidence: dict = {"tol": limits.tol}
    trajectory, eps = None, torch.finfo(torch.float64).eps
    if states is not None:
        if not isinstance(states, torch.Tensor) or states.dim() < 1 or states.shape[0] < 2:
            raise ArgumentError(
                "states must be a trajectory tensor [T, *state] with T >= 2 (e.g. m.trajectory(x0, steps)), got "
                f"{type(states).__name__ if not isinstance(states, torch.Tensor) else tuple(states.shape)}.")
        if not states.dtype.is_floating_point:
            raise ArgumentError(f"states must be a floating tensor, got {states.dtype}.")
        eps = torch.finfo(states.dtype).eps
        trajectory = states.detach().reshape(states.shape[0], -1).to(torch.float64)
        step_sizes = (trajectory[1:] - trajectory[:-1]).norm(dim=1) if step_sizes is None else step_sizes
        state_norms = trajectory.norm(dim=1) if state_norms is None else state_norms
    steps = None if step_sizes is None else measured.series(step_sizes, "step_sizes")
    norms = None if state_norms is None else measured.series(state_norms, "state_norms")
    estimate = _estimate(max_lyapunov, max_lyapunov_stderr, history, limits, evidence)
    values = measured.complex_values(eigenvalues)
    radius = _spectral_radius(values, oscillation)
    if radius is not None:
        evidence["spectral_radius"] = radius
    if spectral_norm is not None:
        evidence["spectral_norm"] = measured.scalar(spectral_norm, "spectral_norm", hint="||J||_2 at the last state")
    first_bad = -1 if nonfinite_step is None else measured.nonfinite_index(nonfinite_step)
    return _Observed(estimate, trajectory, steps, norms, eps, first_bad, values, radius, evidence)


def _estimate(value, stderr, history, limits, evidence):
    if history is not None:
        history = measured.series(history, "lyapunov_history")
        if history.numel() == 0:
            raise ArgumentError("lyapunov_history is empty: pass the running estimates, one per loop.")
        estimate = measured.exponent_from_history(history, limits.resolution) if bool(
            torch.isfinite(history).all()) else measured.exponent_from_summary(math.nan, None, limits.resolution)
    elif value is not None:
        value = measured.scalar(value, "max_lyapunov", hint="lyap.exponents[0] (lyap.exponents[i, 0] in a batch)")
        error = None if stderr is None else measured.scalar(stderr, "max_lyapunov_stderr", hint="lyap.stderr[0]")
        estimate = measured.exponent_from_summary(value, error, limits.resolution)
    else:
        return None
    evidence.update(max_lyapunov=estimate.whole, lambda_late=estimate.value)
    for key, number in (("lambda_stderr", estimate.stderr), ("lambda_half_width", estimate.half_width)):
        if math.isfinite(number):
            evidence[key] = number
    if estimate.last_loop:
        evidence.update(lambda_loops=f"{estimate.first_loop}-{estimate.last_loop}", lambda_drift=estimate.drift)
    return estimate


def _spectral_radius(values, oscillation):
    if values:
        return max(abs(v) for v in values)
    if oscillation is None:
        return None
    radius = oscillation.get("spectral_radius") if isinstance(oscillation, dict) else getattr(
        oscillation, "spectral_radius", None)
    if radius is None:
        raise ArgumentError(f"oscillation must be an OscillationMeasures (or its as_dict()) with 'spectral_radius'; "
                            f"got {type(oscillation).__name__}.")
    if isinstance(radius, (list, tuple)):
        radius = torch.as_tensor(radius)
    return measured.scalar(radius, "oscillation.spectral_radius", hint="the measures of one spectrum")


# ---------------------------------------------------------------------------------------------------- rules
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
    width = f" +/- {estimate.half_width:.2g}" if math.isfinite(estimate.half_width) else ""
    text = f"lambda_max = {estimate.value:.3g}{width} (95%){where}"
    if seen.spectral_radius is not None:
        text += f", rho(J) = {seen.spectral_radius:.3g}"
    return text


def _verdict(regime: Regime, seen: _Observed, reason: str) -> RegimeVerdict:
    seen.evidence["reason"] = reason
    seen.evidence.setdefault("period", 0)
    return RegimeVerdict(regime=Regime(regime).value, evidence=seen.evidence)
