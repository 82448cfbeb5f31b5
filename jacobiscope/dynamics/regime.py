"""Regime of a looped map from its measurements: converging, critical, chaotic, oscillating or diverging.

The verdict combines what the engine measures along one trajectory of ``X_{t+1} = F(X_t)``: the largest Lyapunov
exponent (with its standard error), the step sizes ``||X_{t+1} - X_t||``, the state norms, the loop at which the
trajectory went NaN/Inf, and optionally the states themselves (to find a period) and the oscillation measures of
a Jacobian spectrum (recorded as evidence). Each verdict carries the numbers behind it and a one-line reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import torch

from ..errors import ArgumentError

__all__ = ["Regime", "REGIMES", "RegimeVerdict", "classify_dynamics"]


class Regime(str, Enum):
    """The one vocabulary of verdicts, used by the classifier, the diagnostics, reports and the CLI.

    Example::

        >>> from jacobiscope.dynamics.regime import Regime
        >>> Regime("critical") is Regime.CRITICAL, Regime.CRITICAL == "critical"
        (True, True)

    A `str` enum, so a verdict compares equal to its plain name and JSON holds the name. ``UNKNOWN`` is what a row
    says when the verdict could not be reached (the Lyapunov exponent was not measured).
    """

    CONVERGING = "converging"
    CRITICAL = "critical"
    CHAOTIC = "chaotic"
    OSCILLATING = "oscillating"
    DIVERGING = "diverging"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


#: The verdicts `classify_dynamics` reaches (every `Regime` but ``unknown``).
REGIMES = tuple(regime.value for regime in Regime if regime is not Regime.UNKNOWN)


@dataclass
class RegimeVerdict:
    """What `classify_dynamics` returns.

    Attributes:
        regime: one of ``"converging"``, ``"critical"``, ``"chaotic"``, ``"oscillating"``, ``"diverging"``.
        evidence: the numbers behind the verdict as plain ``float`` / ``int`` / ``bool`` / ``str`` (JSON-ready;
            a quantity that could not be measured is absent rather than ``None``), including ``reason``, one line.
    """

    regime: str
    evidence: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        """The one-line reason for the verdict."""
        return self.evidence.get("reason", "")

    def as_dict(self) -> dict:
        """``{"regime": ..., "reason": ..., "evidence": {...}}`` with plain Python values."""
        return {"regime": self.regime, "reason": self.reason, "evidence": dict(self.evidence)}


def classify_dynamics(
    *,
    max_lyapunov,
    max_lyapunov_stderr=None,
    step_sizes=None,
    state_norms=None,
    nonfinite_step=None,
    oscillation=None,
    states: torch.Tensor | None = None,
    tol: float = 0.01,
    significance: float = 2.0,
    divergence_ratio: float = 1e3,
    growth_fraction: float = 0.9,
    decay_ratio: float = 1e-3,
    max_period: int = 16,
    period_rtol: float = 1e-4,
) -> RegimeVerdict:
    """Classify one trajectory of a looped map (discrete time) as converging, critical, chaotic, oscillating or
    diverging.

    Example::

        >>> import jacobiscope
        >>> from jacobiscope.dynamics.regime import classify_dynamics
        >>> m = jacobiscope.systems.logistic_map(3.2)                   # a stable period-2 orbit
        >>> lyap = jacobiscope.lyapunov_spectrum(m, m.x0, steps=400, transient=100)
        >>> verdict = classify_dynamics(max_lyapunov=lyap.exponents[0], max_lyapunov_stderr=lyap.stderr[0],
        ...                             nonfinite_step=lyap.nonfinite_step, states=m.trajectory(m.x0, 200))
        >>> verdict.regime, verdict.evidence["period"], round(verdict.evidence["max_lyapunov"], 3)
        ('oscillating', 2, -0.916)

    Signature: ``classify_dynamics(*, max_lyapunov, max_lyapunov_stderr=None, step_sizes=None, state_norms=None,
    nonfinite_step=None, oscillation=None, states=None, tol=0.01, significance=2.0, divergence_ratio=1e3,
    growth_fraction=0.9, decay_ratio=1e-3, max_period=16, period_rtol=1e-4)``

    Arguments:
        max_lyapunov: the largest Lyapunov exponent of this trajectory (nats per loop), a number or a one-element
            tensor such as ``lyap.exponents[0]`` (``lyap.exponents[i, 0]`` for trajectory ``i`` of a batch).
        max_lyapunov_stderr: its standard error (``lyap.stderr[0]``); without it only ``tol`` decides the sign.
        step_sizes: ``||X_{t+1} - X_t||`` along the trajectory, ``[T-1]`` (derived from ``states`` when omitted).
        state_norms: ``||X_t||`` along the trajectory, ``[T]`` (derived from ``states`` when omitted).
        nonfinite_step: the loop at which the trajectory became NaN/Inf, or -1 (``lyap.nonfinite_step``).
        oscillation: an `OscillationMeasures` of one Jacobian spectrum (or its ``as_dict()``); its spectral
            radius, oscillatory fraction and largest rotation angle are recorded as evidence. They do not change
            the verdict: the spectrum at one state says nothing certain about where the orbit ends up.
        states: the trajectory ``[T, *state]`` (one trajectory: every dimension after the first is the state).
            Needed to detect a period; also supplies missing ``step_sizes`` / ``state_norms``.
        tol: exponents with ``|lambda| <= tol`` are marginal (zero within tolerance); also the rate (per loop)
            above which steady norm growth means divergence and below which step sizes count as decaying.
        significance: an exponent is only called positive or negative when it is beyond
            ``significance * stderr`` of zero as well as beyond ``tol``.
        divergence_ratio: diverging when the largest norm of the second half of the trajectory exceeds the largest
            of the first half by this factor.
        growth_fraction: with a log-norm growth rate above ``tol`` over the last quarter, diverging when at least
            this fraction of the last half's loops increased the norm (a steady exponential growth, not the
            fluctuations of a bounded attractor) and the norm grew by at least 1.5x over that half.
        decay_ratio: steps have decayed when the late step size is below ``decay_ratio`` times the largest.
        max_period: longest period searched for (``states`` needed).
        period_rtol: a period ``p >= 2`` is found when ``||X_{t+p} - X_t||`` stays below ``period_rtol`` times the
            typical step (plus a rounding floor of ``100 eps ||X||``) over the last half of the trajectory.

    Returns:
        `RegimeVerdict` with ``regime`` and ``evidence``.

    Rules, in order (first match wins):

    1. **diverging**: the trajectory went NaN/Inf (``nonfinite_step >= 0``, non-finite states, steps or norms, a
       NaN or ``+inf`` exponent), or its norm grows without bound (``divergence_ratio``, or steady exponential
       growth as described under ``growth_fraction``).
    2. The exponent is *negative* when ``lambda < -tol`` and ``lambda < -significance * stderr``, *positive*
       when ``lambda > tol`` and ``lambda > significance * stderr``, *marginal* otherwise.
    3. positive: **chaotic** (the norm stayed bounded, rule 1).
    4. negative: **converging** when the step sizes decay to 0 (a stable fixed point: the late steps are below
       ``decay_ratio`` times the largest, or shrink at a log-rate faster than ``tol`` per loop), or when no step
       sizes were given (the verdict then rests on the exponent alone, and the reason says so). **oscillating**
       when the steps persist: a map's attracting periodic orbit has a negative largest exponent and a step that
       never vanishes. The period is reported when found (``period`` 0 otherwise).
    5. marginal: **oscillating** when the steps persist *and* a period ``p >= 2`` is found (a neutral periodic
       orbit, e.g. a rotation by a rational angle, or a map at a period-doubling point); **critical** otherwise:
       persistent steps without a period (quasi-periodic motion, e.g. rotation by an irrational angle: lambda = 0
       and the orbit never closes), or steps decaying slower than exponentially (a marginally stable fixed
       point), or no step information.

    References: Tomihari & Karakida, NeurIPS 2025 (criticality of looped transformers: lambda_max near 0);
    J.-P. Eckmann & D. Ruelle, Ergodic theory of chaos and strange attractors, Rev. Mod. Phys. 57 (1985).
    """
    for name, value in (("tol", tol), ("significance", significance), ("period_rtol", period_rtol)):
        _require_number(value, name, minimum=0.0)
    _require_number(divergence_ratio, "divergence_ratio", minimum=1.0)
    _require_number(growth_fraction, "growth_fraction", minimum=0.0, maximum=1.0)
    _require_number(decay_ratio, "decay_ratio", minimum=0.0, maximum=1.0)
    if isinstance(max_period, bool) or not isinstance(max_period, int) or max_period < 0:
        raise ArgumentError(f"max_period must be a non-negative int (0 disables period search), got {max_period!r}.")

    lam = _scalar(max_lyapunov, "max_lyapunov", hint="lyap.exponents[0] (lyap.exponents[i, 0] in a batch)")
    stderr = None if max_lyapunov_stderr is None else _scalar(max_lyapunov_stderr, "max_lyapunov_stderr",
                                                               hint="lyap.stderr[0]")
    evidence: dict = {"max_lyapunov": lam, "tol": float(tol)}
    if stderr is not None and math.isfinite(stderr):
        evidence["max_lyapunov_stderr"] = stderr

    trajectory = None
    if states is not None:
        if not isinstance(states, torch.Tensor) or states.dim() < 1 or states.shape[0] < 2:
            raise ArgumentError(
                "states must be a trajectory tensor [T, *state] with T >= 2 (e.g. m.trajectory(x0, steps)), got "
                f"{type(states).__name__ if not isinstance(states, torch.Tensor) else tuple(states.shape)}."
            )
        if not states.dtype.is_floating_point:
            raise ArgumentError(f"states must be a floating tensor, got {states.dtype}.")
        trajectory = states.detach().reshape(states.shape[0], -1).to(torch.float64)
        if step_sizes is None:
            step_sizes = (trajectory[1:] - trajectory[:-1]).norm(dim=1)
        if state_norms is None:
            state_norms = trajectory.norm(dim=1)
    steps = None if step_sizes is None else _series(step_sizes, "step_sizes")
    norms = None if state_norms is None else _series(state_norms, "state_norms")

    # ---- rule 1: diverging
    first_bad = -1
    if nonfinite_step is not None:
        first_bad = _nonfinite_index(nonfinite_step)
        evidence["nonfinite_step"] = first_bad
    bad_series = [name for name, series in (("states", trajectory), ("step sizes", steps), ("state norms", norms))
                  if series is not None and not bool(torch.isfinite(series).all())]
    if first_bad >= 0:
        return _verdict("diverging", evidence, f"the trajectory became NaN/Inf at loop {first_bad}")
    if bad_series:
        return _verdict("diverging", evidence, f"the {bad_series[0]} contain NaN/Inf: the trajectory blew up")
    if math.isnan(lam) or lam == math.inf:
        return _verdict("diverging", evidence, f"the exponent is {lam}: the trajectory went non-finite "
                        "(lyapunov_spectrum marks such trajectories with NaN)")
    if norms is not None and norms.numel() >= 4:
        growth, rate, rising = _norm_growth(norms)
        evidence.update(norm_first=float(norms[0]), norm_last=float(norms[-1]), norm_growth=growth,
                        norm_log_rate=rate, norm_rising_fraction=rising)
        if growth > divergence_ratio:
            return _verdict("diverging", evidence, f"the norm grew {growth:.3g}x from the first half of the "
                            f"trajectory to the second (> {divergence_ratio:g})")
        half = norms.numel() // 2
        last_half_growth = float(norms[-1] / norms[half].clamp_min(1e-300)) if norms.numel() >= 4 else 1.0
        evidence["norm_last_half_growth"] = last_half_growth
        # A bounded (normalized) stream can creep upwards for a few loops; steady growth must also be large.
        if rate > tol and rising >= growth_fraction and last_half_growth >= 1.5:
            return _verdict("diverging", evidence, f"the norm grows steadily at {rate:.3g} nats/loop "
                            f"(rising in {rising:.0%} of the last half's loops)")

    # ---- rule 2: the sign of the exponent
    margin = significance * stderr if stderr is not None and math.isfinite(stderr) else 0.0
    if lam > tol and lam > margin:
        sign = "positive"
    elif lam < -tol and lam < -margin:
        sign = "negative"
    else:
        sign = "marginal"
    evidence["exponent_sign"] = sign

    decaying = None
    if steps is not None and steps.numel() >= 4:
        decaying = _step_decay(steps, tol, decay_ratio, evidence)
    period = 0
    if trajectory is not None and decaying is False and max_period >= 2:
        period = _find_period(trajectory, max_period, period_rtol, evidence)
    if decaying is not None:
        evidence["steps_decay"] = decaying
    if oscillation is not None:
        evidence.update(_oscillation_evidence(oscillation))
    evidence["period"] = period
    lam_text = f"lambda_max = {lam:.4g}" + (f" +- {stderr:.2g}" if "max_lyapunov_stderr" in evidence else "")

    # ---- rules 3-5
    if sign == "positive":
        note = " (but the steps decayed: the orbit sits on an unstable invariant set)" if decaying else ""
        return _verdict("chaotic", evidence, f"{lam_text} > 0 with a bounded norm{note}")
    if sign == "negative":
        if decaying is None:
            return _verdict("converging", evidence, f"{lam_text} < 0 (no step sizes given: verdict from the exponent "
                            "alone)")
        if decaying:
            return _verdict("converging", evidence, f"{lam_text} < 0 and the steps decay to 0: a stable fixed point")
        found = f"period {period}" if period else f"no period <= {max_period} found"
        return _verdict("oscillating", evidence, f"{lam_text} < 0 but the steps persist: an attracting orbit ({found})")
    if decaying is False and period:
        return _verdict("oscillating", evidence, f"{lam_text} ~ 0 and the orbit repeats with period {period}")
    if decaying is False:
        what = (f"no period <= {max_period} found: quasi-periodic or marginal" if trajectory is not None and max_period
                >= 2 else "no states given to look for a period")
        return _verdict("critical", evidence, f"{lam_text} ~ 0 with persistent steps ({what})")
    if decaying:
        return _verdict("critical", evidence, f"{lam_text} ~ 0 while the steps decay: a marginally stable fixed point")
    return _verdict("critical", evidence, f"{lam_text} ~ 0 (no step sizes given: verdict from the exponent alone)")


# ---------------------------------------------------------------------------------------------------- helpers
def _verdict(regime: str, evidence: dict, reason: str) -> RegimeVerdict:
    evidence["reason"] = reason
    return RegimeVerdict(regime=Regime(regime).value, evidence=evidence)  # the one vocabulary, checked


def _require_number(value, name, minimum=None, maximum=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
        minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ArgumentError(f"{name} must be a finite number {bounds}, got {value!r}.")


def _scalar(value, name: str, hint: str) -> float:
    """One number from a float, an int or a one-element tensor; anything bigger is a batch and is refused."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ArgumentError(
                f"classify_dynamics classifies one trajectory: {name} must be one number, got a tensor of shape "
                f"{tuple(value.shape)}. Pass e.g. {hint}, and call once per trajectory of a batch."
            )
        return float(value.reshape(()))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentError(f"{name} must be a number or a one-element tensor, got {type(value).__name__}.")
    return float(value)


def _series(value, name: str) -> torch.Tensor:
    """A 1-D float64 series (sequence or tensor, on its own device) for one trajectory."""
    series = torch.as_tensor(value).detach()
    if series.dim() != 1:
        raise ArgumentError(
            f"{name} must be a 1-D series over time for one trajectory, got shape {tuple(series.shape)}. For a "
            "batch, index one trajectory (e.g. norms[:, i]) and call once per trajectory."
        )
    if series.is_complex():
        raise ArgumentError(f"{name} must be real (norms), got {series.dtype}.")
    return series.to(torch.float64)


def _nonfinite_index(value) -> int:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ArgumentError(
                f"nonfinite_step must be one loop index for one trajectory, got shape {tuple(value.shape)}. "
                "Pass lyap.nonfinite_step (unbatched) or lyap.nonfinite_step[i]."
            )
        return int(value.reshape(()))
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"nonfinite_step must be an int loop index or -1, got {value!r}.")
    return value


def _log_slope(series: torch.Tensor) -> float:
    """Least-squares slope of ``log(series)`` against the loop index (zeros clamped to the smallest normal)."""
    y = series.clamp_min(torch.finfo(torch.float64).tiny).log()
    t = torch.arange(y.numel(), dtype=y.dtype, device=y.device)
    t = t - t.mean()
    return float((t * (y - y.mean())).sum() / (t * t).sum())


def _norm_growth(norms: torch.Tensor):
    """(largest norm of the second half / of the first half, log-rate over the last quarter, rising fraction)."""
    half = norms.numel() // 2
    early, late = float(norms[:half].max()), float(norms[half:].max())
    growth = late / early if early > 0 else (math.inf if late > 0 else 1.0)
    quarter = norms[-max(norms.numel() // 4, 3):]
    rate = _log_slope(quarter)
    rising = float((norms[half:].diff() > 0).to(torch.float64).mean())
    return growth, rate, rising


def _step_decay(steps: torch.Tensor, tol: float, decay_ratio: float, evidence: dict) -> bool:
    """Whether the step sizes decay to 0 (records the numbers in ``evidence``)."""
    quarter = max(steps.numel() // 4, 1)
    largest = float(steps.max())
    early = float(steps[:quarter].median())
    late = float(steps[-quarter:].median())
    ratio = late / largest if largest > 0 else 0.0
    rate = _log_slope(steps[steps.numel() // 2:])
    evidence.update(step_largest=largest, step_early=early, step_late=late, step_decay_ratio=ratio,
                    step_log_rate=rate)
    # Exactly zero steps (an exact fixed point), a collapse by decay_ratio, or a steady exponential shrinking that
    # has already taken the late steps below the early ones. A periodic orbit has a flat step series.
    return largest == 0 or late == 0 or ratio <= decay_ratio or (rate < -tol and late < early)


def _find_period(trajectory: torch.Tensor, max_period: int, rtol: float, evidence: dict) -> int:
    """Smallest ``p`` in ``[2, max_period]`` with ``||X_{t+p} - X_t||`` small over the last half, or 0."""
    tail = trajectory[trajectory.shape[0] // 2:]
    length = tail.shape[0]
    if length < 3:
        return 0
    typical = float((tail[1:] - tail[:-1]).norm(dim=1).median())
    floor = 100 * torch.finfo(torch.float64).eps * float(tail.norm(dim=1).max())
    best_p, best = 0, math.inf
    for p in range(2, min(max_period, length // 2) + 1):
        residual = float((tail[p:] - tail[:-p]).norm(dim=1).max())
        relative = residual / typical if typical > 0 else math.inf
        if relative < best:
            best_p, best = p, relative
        if residual <= rtol * typical + floor:
            evidence.update(period_residual=relative, closest_return=p)
            return p
    if best_p:
        evidence.update(period_residual=best, closest_return=best_p)
    return 0


def _oscillation_evidence(oscillation) -> dict:
    out = {}
    for key in ("spectral_radius", "complex_fraction", "max_rotation_angle"):
        value = oscillation.get(key) if isinstance(oscillation, dict) else getattr(oscillation, key, None)
        if value is None:
            raise ArgumentError(
                f"oscillation must be an OscillationMeasures (or its as_dict()) with '{key}'; got "
                f"{type(oscillation).__name__}."
            )
        if isinstance(value, (list, tuple)):
            value = torch.as_tensor(value)
        out[key] = _scalar(value, f"oscillation.{key}", hint="the measures of one spectrum")
    return out
