"""The verdict on the normalized state, for a map whose residual grows with bounded steps (a pre-norm block).

Example::

    >>> import torch, jacobiscope
    >>> drift = torch.tensor([3.0, 4.0], dtype=torch.float64)
    >>> step = lambda x: x + drift / drift.norm() * 0.5 + 0.01 * torch.tanh(x.flip(0))   # bounded update
    >>> row = jacobiscope.measure(step, torch.tensor([1.0, 0.0], dtype=torch.float64), loops=64, k=1)
    >>> row.regime, row.evidence["judged_on"], row.evidence["state_regime"]
    ('converging', 'normalized state', 'diverging')

What it decides: the state's norm grows (that is said, with its growth exponent: ~1, linear, for a bounded update),
and the dynamics are read on ``u = x / rms(x)`` (per token), what a following norm sees. The rules of
`classify_dynamics` run on ``u`` with the normalized map's exponents, norm and eigenvalues
(`jacobiscope.dynamics._normalized`). A growing residual slows the direction down like ``1 / ||x||``: the
direction's steps fall like a power ``t^p`` and its exponents like ``1 / t``. So the direction **settles** when its
steps fall faster than ``t^-1.5`` (the motion left, their sum, is finite: it converges to a limit direction), or when
the rules find a fixed point on ``u``; a slower fall (``t^-1``: a drift of order ``log t``) is **undetermined** (more
loops decide); the exponent's sign alone cannot call chaos there, since its size is that of the slowing.
"""
from __future__ import annotations

import math

import torch

from ._normalized import (
    NORMALIZED_STATE, ResidualGrowth, _log_log_slope, normalize_states, normalized_eigenvalues, normalized_lyapunov,
    normalized_norms,
)
from ._regime_types import Regime, RegimeThresholds, RegimeVerdict

__all__ = ["normalized_verdict", "SETTLED_POWER", "direction_power"]

#: The direction settles when its late steps fall at least as fast as ``t ** SETTLED_POWER`` (their sum converges
#: with margin: at ``t^-1`` it would grow like log t).
SETTLED_POWER = -1.5


def direction_power(u: torch.Tensor) -> float:
    """``p`` in ``||u_{t+1} - u_t|| ~ t^p`` over the last half of a normalized trajectory ``[T, *state]``."""
    flat = u.reshape(u.shape[0], -1).to(torch.float64)
    steps = (flat[1:] - flat[:-1]).norm(dim=1) / math.sqrt(flat.shape[1])
    half = steps.numel() // 2
    if steps.numel() - half < 3 or not bool((steps[half:] > 0).all()):
        return -math.inf if bool((steps[half:] == 0).all()) else math.nan
    times = torch.arange(half, steps.numel(), dtype=torch.float64) + 1.0
    return _log_log_slope(times, steps[half:])


def normalized_verdict(looped, states: torch.Tensor, state_verdict: RegimeVerdict, growth: ResidualGrowth, *, k: int,
                       eigen_k: int, eigen_restarts: int, norm_loops: list, seed: int = 0) -> RegimeVerdict:
    """The verdict on ``u = x / rms(x)`` along ``states`` ``[T + 1, *state]`` of ``looped`` (one batch axis of
    size 1), with the state's own verdict and numbers kept in the evidence under ``state_*``."""
    from .regime import classify_dynamics

    u, _ = normalize_states(states)
    history = normalized_lyapunov(looped, states, k, seed)["history"] if k else None
    eigenvalues = normalized_eigenvalues(looped, states, eigen_k, eigen_restarts, seed) if eigen_k else None
    norms = normalized_norms(looped, states, norm_loops, seed) if norm_loops else {}
    last = states.shape[0] - 1
    on_u = classify_dynamics(lyapunov_history=[row[0] for row in history] if history else None, states=u,
                             eigenvalues=eigenvalues, spectral_norm=norms.get(last))
    power = direction_power(u)
    evidence = dict(on_u.evidence)
    evidence.update(growth.as_evidence())
    evidence.update(judged_on=NORMALIZED_STATE, direction_step_power=power, state_regime=state_verdict.regime,
                    state_reason=state_verdict.reason)
    for key in ("lambda_late", "lambda_half_width", "spectral_norm", "spectral_radius"):
        if key in state_verdict.evidence:
            evidence[f"state_{key}"] = state_verdict.evidence[key]
    if history:
        evidence["normalized_lambda_history"] = [row[0] for row in history]
    if norms:
        evidence["normalized_spectral_norms"] = [[loop, value] for loop, value in sorted(norms.items())]
    regime, said = _decide(on_u, power)
    evidence.pop("loops_needed", None)
    if regime == Regime.UNDETERMINED.value:
        evidence["loops_needed"] = 4 * last
    evidence["reason"] = (f"{growth.sentence(last)}, so the verdict reads the normalized state x/rms(x) (what the "
                          f"next norm sees): {said}")
    return RegimeVerdict(regime=regime, evidence=evidence)


def _decide(on_u: RegimeVerdict, power: float) -> tuple[str, str]:
    """(regime, the sentence on the normalized state)."""
    rules = on_u.reason
    steps = f"its steps fall like t^{power:.2g}" if math.isfinite(power) else "its steps vanish"
    if on_u.regime in (Regime.CONVERGING.value, Regime.PERIODIC.value, Regime.DIVERGING.value):
        return on_u.regime, f"{rules}; {steps}"
    if power <= SETTLED_POWER:
        return Regime.CONVERGING.value, (f"the direction settles: {steps} (<= t^{SETTLED_POWER:g}: a finite motion "
                                         f"left); {_exponent_clause(on_u)}")
    return Regime.UNDETERMINED.value, (f"the direction still moves: {steps} (slower than t^{SETTLED_POWER:g}: "
                                       f"settling or drifting cannot be told yet); {_exponent_clause(on_u)}")


def _exponent_clause(on_u: RegimeVerdict) -> str:
    evidence = on_u.evidence
    late = evidence.get("lambda_late")
    if not isinstance(late, (int, float)):
        return "lambda_max not measured"
    width = evidence.get("lambda_half_width")
    text = f"lambda_max = {late:.3g}"
    if isinstance(width, (int, float)) and math.isfinite(width):
        text += f" +/- {width:.2g} (95%)"
    if evidence.get("lambda_loops"):
        text += f" over loops {evidence['lambda_loops']}"
    text += " on the normalized state"
    if abs(late) <= RegimeThresholds().tol:
        # per-loop exponents of a direction that the growing residual slows down like 1/t fall like 1/t too
        text += f", within {RegimeThresholds().tol:g} of 0 (the growing residual slows the direction like 1/t)"
    return text
