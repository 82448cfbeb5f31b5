"""The matrix gradient-flow ODEs of the attention-indexed model, the ``eta -> 0`` limit of online SGD (spec B.3)."""
from __future__ import annotations

import torch

from ..errors import ArgumentError
from ._aim_checks import count, finite, square
from ._aim_losses import population_gradient
from ._aim_model import PARAMETERIZATIONS


def gradient_flow(S_star: torch.Tensor, S0: torch.Tensor, *, link: str = "he2", parameterization: str = "tied",
                  t: float = 1.0, dt: float = 0.01, exact: bool = True, A0: torch.Tensor | None = None,
                  B0: torch.Tensor | None = None, record_every: int = 1):
    """RK4 integration of the matrix gradient-flow ODE closed in ``S`` (the ``eta -> 0`` limit of `online_sgd`).

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import gradient_flow
        >>> I3 = torch.eye(3, dtype=torch.float64)
        >>> times, S = gradient_flow(I3, 0.1 * I3, link="he1", t=20.0, dt=0.05)
        >>> round(float((S[-1] - torch.eye(3)).abs().max()), 6)          # tied He1 learns a PSD teacher
        0.0

    Arguments:
        S_star: teacher ``[..., d, d]``; S0: initial student ``S`` (tied: ``kappa W0 W0^T``; untied:
        ``kappa U0 V0^T`` with ``A0 = kappa U0 U0^T`` and ``B0 = kappa V0 V0^T`` required).
        link: ``"he1"``, ``"he2"``, ``"he3"``; exact: the He2 finite-``d`` part of ``G``.
        parameterization: ``"direct"``: ``S' = -G``; ``"tied"``: ``S' = -2 (G S + S G)``; ``"untied"``:
            ``S' = -(G B + A G)``, ``A' = -(G S^T + S G^T)``, ``B' = -(G^T S + S^T G)``.
        t, dt, record_every: horizon, RK4 step and recording stride (time is ``samples * eta / d^2``).

    Returns:
        ``(times [K], S [K, ..., d, d])``.

    References: theory spec B.3 (cost O(d^3) per step; the reference for truncated hierarchies).
    """
    if parameterization not in PARAMETERIZATIONS:
        raise ArgumentError(f"parameterization must be one of {PARAMETERIZATIONS}, got {parameterization!r}.")
    if link not in ("he1", "he2", "he3"):
        raise ArgumentError(f"gradient_flow needs a closed-form link 'he1', 'he2' or 'he3', got {link!r}; for the "
                            "softmax link use online_sgd, or population_gradient(S, S_star, 'softmax') for the drift.")
    if parameterization == "untied" and (A0 is None or B0 is None):
        raise ArgumentError("the untied flow needs A0 = kappa U0 U0^T and B0 = kappa V0 V0^T as well as S0.")
    T = square(S_star, "S_star")
    S0 = square(S0, "S0", T.shape[-1])
    if parameterization == "untied":
        A0, B0 = square(A0, "A0", T.shape[-1]), square(B0, "B0", T.shape[-1])
    t, dt = finite(t, "t", low=0, example="1.0"), finite(dt, "dt", low=0, example="0.01")
    count(record_every, "record_every")

    def rhs(state):
        S = state[0]
        G = population_gradient(S, T, link, exact=exact)
        if parameterization == "direct":
            return (-G,)
        if parameterization == "tied":
            return (-2 * (G @ S + S @ G),)
        A, B = state[1], state[2]
        return (-(G @ B + A @ G), -(G @ S.mT + S @ G.mT), -(G.mT @ S + S.mT @ G))

    state = (S0,) if parameterization != "untied" else (S0, A0, B0)
    steps = max(int(round(t / dt)), 1)
    frames = [S0]
    for step in range(1, steps + 1):
        k1 = rhs(state)
        k2 = rhs(tuple(s + 0.5 * dt * k for s, k in zip(state, k1)))
        k3 = rhs(tuple(s + 0.5 * dt * k for s, k in zip(state, k2)))
        k4 = rhs(tuple(s + dt * k for s, k in zip(state, k3)))
        state = tuple(s + (dt / 6) * (a + 2 * b + 2 * c + e) for s, a, b, c, e in zip(state, k1, k2, k3, k4))
        if step % record_every == 0:
            frames.append(state[0])
    times = torch.arange(len(frames), dtype=S0.dtype, device=S0.device) * dt * record_every
    return times, torch.stack(frames)
