"""The normalized state of a residual stream — what the next norm sees — and its Jacobian numbers.

A pre-norm block (Llama, GPT-2: ``x -> x + f(Norm x)``) adds an update of bounded size to the residual stream,
whatever the stream's size: looped, the stream grows about linearly while its direction may settle. The raw norm
then grows without bound, ``||J|| = ||I + Df Dnorm||`` falls like ``1/t`` and a verdict read on the raw state says
"diverging", although everything a later norm (and so the rest of the model) sees has settled. This module
detects that case from the trajectory and measures the dynamics of the normalized state
``u_t = x_t / rms(x_t)`` (per token: RMSNorm without its gain) along the real run.

Example::

    >>> import torch
    >>> from jacobiscope.dynamics._normalized import residual_growth
    >>> t = torch.arange(65, dtype=torch.float64)
    >>> states = torch.stack([torch.tensor([1.0, 2.0]) * (1 + s) + torch.tensor([0.5, 0.0]) for s in t])
    >>> growth = residual_growth(states)
    >>> growth.bounded_growth, round(growth.exponent, 2)       # grows like t^1 with bounded steps
    (True, 1.0)

The normalized map at loop ``t`` is ``G_t(u) = N(F(r_t * u))`` with ``r_t`` the stream's per-token RMS at loop
``t`` and ``N`` the RMS normalization: ``G_t(u_t) = u_{t+1}`` exactly, and its Jacobian is the tangent map of the
normalized dynamics (``J_G = DN(x_{t+1}) J_F(x_t) r_t``: what a perturbation of the direction becomes in the next
direction). Its exponents, norm and eigenvalues are the numbers a verdict on the normalized state reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..linalg.eig import jacobian_eigenvalues
from ..linalg.operators import jacobian_matmat
from ..linalg.svd import spectral_norm
from ..maps import LoopedMap
from . import _regime_evidence as measured

__all__ = ["ResidualGrowth", "residual_growth", "normalize_states", "normalized_map", "normalized_lyapunov",
           "NORMALIZED_STATE"]

#: How a verdict names the normalized state in its evidence (``judged_on``) and its sentences.
NORMALIZED_STATE = "normalized state"


def _rms(x: torch.Tensor, leading: int) -> torch.Tensor:
    """Per-token RMS (over the last axis) for states with a token axis, else over the whole state; ``leading``
    axes (time, batch) are kept; the result broadcasts against ``x``."""
    if x.dim() - leading >= 2:
        return x.pow(2).mean(-1, keepdim=True).sqrt()
    flat = x.reshape(*x.shape[:leading], -1)
    return flat.pow(2).mean(-1).sqrt().reshape(*x.shape[:leading], *([1] * (x.dim() - leading)))


def normalize_states(states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u, r)``: the trajectory ``[T, *state]`` as RMS-normalized states and their per-token RMS."""
    radius = _rms(states, 1)
    return states / radius.clamp_min(torch.finfo(states.dtype).tiny), radius


@dataclass
class ResidualGrowth:
    """How the state's size grows along a trajectory, and whether the growth is the bounded-update kind.

    Attributes:
        norm_first, norm_last: RMS of the first and last states.
        exponent: ``d log ||x|| / d log t`` over the last half (1: linear growth, as a bounded update gives).
        norm_rate, step_rate: log-slopes per loop of the norm and of the absolute step ``||x_{t+1} - x_t||`` over
            the last half.
        rising_fraction: share of the last half's loops in which the norm rose.
        bounded_growth: the norm rises steadily (90% of the late loops, by 10% or more over the last half) while
            the steps grow at less than half its rate: polynomial growth from a bounded update (a pre-norm
            residual), not an exponential blow-up (whose steps grow with the state).
        direction_step: median step of the normalized state over the last quarter (relative: ``||u|| = 1``).
    """

    norm_first: float
    norm_last: float
    exponent: float
    norm_rate: float
    step_rate: float
    rising_fraction: float
    bounded_growth: bool
    direction_step: float

    def as_evidence(self) -> dict:
        return {"residual_norm_first": self.norm_first, "residual_norm_last": self.norm_last,
                "residual_growth_exponent": self.exponent, "residual_step_log_rate": self.step_rate,
                "direction_step_late": self.direction_step}

    def sentence(self, loops: int) -> str:
        """What grows, in words: ``"the residual RMS grows ~linearly (0.5 -> 31 over 64 loops), its steps not"``."""
        shape = "~linearly" if abs(self.exponent - 1) <= 0.25 else f"like t^{self.exponent:.2g}"
        steps = ("its steps stay bounded" if self.step_rate <= 0.1 * self.norm_rate else
                 "its steps grow at most half as fast (no blow-up)")
        return (f"the residual RMS grows {shape} ({self.norm_first:.3g} -> {self.norm_last:.3g} over {loops} loops), "
                f"{steps}")


def residual_growth(states: torch.Tensor) -> ResidualGrowth | None:
    """`ResidualGrowth` of a finite trajectory ``[T, *state]`` (None for fewer than 8 loops or NaN/Inf)."""
    states = states.detach().to(torch.float64)
    if states.shape[0] < 9 or not bool(torch.isfinite(states).all()):
        return None
    flat = states.reshape(states.shape[0], -1)
    tokens = states.shape[1] if states.dim() > 2 else 1
    norms = flat.norm(dim=1) / math.sqrt(tokens)  # RMS per token, as the rows' state_norm
    steps = (flat[1:] - flat[:-1]).norm(dim=1)
    half = norms.numel() // 2
    late_norms = norms[half:]
    norm_rate, _ = measured.log_slope(late_norms)
    step_rate, _ = measured.log_slope(steps[half:])
    times = torch.arange(half, norms.numel(), dtype=torch.float64) + 1.0
    exponent = _log_log_slope(times, late_norms)
    rising = float((late_norms.diff() > 0).to(torch.float64).mean()) if late_norms.numel() > 1 else 0.0
    grew = float(norms[-1] / norms[half].clamp_min(1e-300))
    bounded = rising >= 0.9 and grew >= 1.1 and norm_rate > 0 and step_rate < 0.5 * norm_rate
    u, _ = normalize_states(states)
    u_flat = u.reshape(u.shape[0], -1) / math.sqrt(flat.shape[1])
    direction = (u_flat[1:] - u_flat[:-1]).norm(dim=1)
    quarter = max(direction.numel() // 4, 1)
    return ResidualGrowth(norm_first=float(norms[0]), norm_last=float(norms[-1]), exponent=exponent,
                          norm_rate=norm_rate, step_rate=step_rate, rising_fraction=rising, bounded_growth=bounded,
                          direction_step=float(direction[-quarter:].median()))


def _log_log_slope(times: torch.Tensor, values: torch.Tensor) -> float:
    x = times.log()
    y = values.clamp_min(1e-300).log()
    x = x - x.mean()
    spread = float((x * x).sum())
    return float((x * (y - y.mean())).sum() / spread) if spread > 0 else math.nan


def normalized_map(looped, radius: torch.Tensor) -> LoopedMap:
    """``u -> N(F(radius * u))`` on a state with one batch axis of size 1 (``radius`` broadcasts against it)."""
    tiny = torch.finfo(radius.dtype).tiny

    def step(u):
        x = looped.step(radius * u)
        return x / _rms(x, 1).clamp_min(tiny)

    return LoopedMap(step, batch_dims=1, name=f"normalized {getattr(looped, 'name', 'map')}")


def normalized_lyapunov(looped, states: torch.Tensor, k: int, seed: int = 0) -> dict:
    """QR/Benettin exponents of the normalized dynamics along the trajectory ``states`` ``[T + 1, *state]`` of
    ``looped`` (a map with one batch axis of size 1): ``{"exponents", "history", "local"}`` as lists, largest
    first (``history[t]``: the running estimate after loop ``t + 1``)."""
    u, radius = normalize_states(states)
    shape = tuple(states.shape[1:])
    size = int(states[0].numel())
    k = max(1, min(k, size - 1))
    generator = torch.Generator().manual_seed(seed)
    frame = torch.randn(k, 1, *shape, generator=generator, dtype=torch.float64).to(states)
    frame = _orthonormal(_tangent(frame, u[0:1]), k)
    local = []
    with torch.no_grad():
        for t in range(states.shape[0] - 1):
            moved = jacobian_matmat(normalized_map(looped, radius[t:t + 1]), u[t:t + 1], frame)
            q, r = torch.linalg.qr(moved.reshape(k, -1).T.to(torch.float64))
            local.append(r.diagonal().abs().clamp_min(1e-300).log())
            frame = q.T.reshape(k, 1, *shape).to(states.dtype)
    local = torch.stack(local)  # [T, k]
    history = local.cumsum(0) / torch.arange(1, local.shape[0] + 1, dtype=torch.float64)[:, None]
    return {"exponents": history[-1].tolist(), "history": history.tolist(), "local": local.tolist()}


def _tangent(frame: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The frame's part orthogonal to each token's ``u`` (the directions along ``u`` only rescale the state)."""
    if u.dim() >= 3:
        along = (frame * u).sum(-1, keepdim=True) / (u * u).sum(-1, keepdim=True).clamp_min(1e-300)
    else:
        dims = tuple(range(2, frame.dim()))
        along = (frame * u).sum(dims, keepdim=True) / (u * u).sum().clamp_min(1e-300)
    return frame - along * u


def _orthonormal(frame: torch.Tensor, k: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(frame.reshape(k, -1).T.to(torch.float64))
    return q.T.reshape(frame.shape).to(frame.dtype)


def normalized_norms(looped, states: torch.Tensor, loops: list[int], seed: int = 0) -> dict:
    """``{loop: ||J_G||_2}`` of the normalized map at the given loops (Lanczos, as the raw spectral norm)."""
    u, radius = normalize_states(states)
    out = {}
    for loop in loops:
        result = spectral_norm(normalized_map(looped, radius[loop:loop + 1]), u[loop:loop + 1], seed=seed)
        out[int(loop)] = float(result.value.max())
    return out


def normalized_eigenvalues(looped, states: torch.Tensor, k: int, restarts: int, seed: int = 0) -> list[complex]:
    """The top-``k`` eigenvalues of the normalized map's Jacobian at the last state."""
    u, radius = normalize_states(states)
    size = int(states[0].numel())
    result = jacobian_eigenvalues(normalized_map(looped, radius[-1:]), u[-1:], k=min(k, size),
                                  max_restarts=max(restarts, 1), seed=seed)
    return [complex(value) for value in result.values.reshape(-1).tolist()]
