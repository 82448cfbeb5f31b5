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
from dataclasses import fields, replace

import torch

from ..errors import ArgumentError
from . import _regime_evidence as measured
from ._regime_rules import (
    _rule_diverging, _rule_exponent, _rule_fixed_point, _rule_periodic, _rule_transient, _verdict
)
from ._regime_types import REGIMES, Regime, RegimeThresholds, RegimeVerdict, _Observed

__all__ = ["Regime", "REGIMES", "RegimeThresholds", "RegimeVerdict", "classify_dynamics"]


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
       the Jacobian's spectral radius at the last state exceeds ``fixed_point_radius`` (an unstable point) — but
       when the steps fell to exactly 0 there, the loop does rest on it: **converging** with
       ``evidence["rest_on_repeller"]`` and a reason saying the point repels (reached exactly, by rounding or a
       start on its stable set; the doubling map empties a float64 state this way).
    3. **periodic**: a period ``p`` in ``2..max_period`` closes (``period_rtol``); a cycle whose interval lies
       above 0 by more than one e-fold over the run repels and carries ``rest_on_repeller`` too.
    4. **undetermined** when lambda_max was measured but the run is still in its transient (drift above
       ``drift_tol`` and above the interval's half-width).
    4b. **converging** when lambda_max is -inf exactly: the Jacobians annihilate every tangent direction (a
       constant or projecting step; superstable), whatever the steps did.
    5. estimate within ``tol`` of 0 and interval at most ``max_half_width`` wide: **oscillating** when the motion
       is quasi-periodic (the late orbit turns steadily in a plane: `RotationEvidence.rotating`; or a dominant
       Jacobian eigenvalue pair lies on the unit circle, ``unit_circle_tol``); otherwise **critical** when the
       interval contains 0.
    6. interval above 0: **chaotic** (bounded, no period), or **critical** when even its upper end parts nearby
       states by less than one e-fold over the run (``high * loops < 1``: neutral drift, not chaos); **undetermined** while the norm still rises steadily
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
        if bool(torch.isfinite(history).all()):
            estimate = measured.exponent_from_history(history, limits.resolution)
        elif bool((history[-1] == -math.inf) & ~torch.isnan(history).any() & ~(history == math.inf).any()):
            # the running estimate fell to -inf: the Jacobians annihilated the tangent exactly, an exact exponent
            estimate = measured.exponent_from_summary(-math.inf, 0.0, limits.resolution)
        else:
            estimate = measured.exponent_from_summary(math.nan, None, limits.resolution)
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
