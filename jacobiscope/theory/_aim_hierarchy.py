"""The tied moment hierarchy: spectral closure on the teacher's spectral law and its Galerkin truncation (spec B.3)."""
from __future__ import annotations

import math

import torch

from ..errors import ArgumentError
from ._aim_checks import count
from ._aim_losses import _dphi, population_loss_from


def marchenko_pastur_spectrum(ratio: float = 0.5, points: int = 400, dtype=torch.float64):
    """A quadrature ``(sigma, weights)`` of the teacher spectrum ``kappa* W* W*^T``, ``W*`` of rank ``r* = ratio d``.

    Example::

        >>> from jacobiscope.theory.aim import marchenko_pastur_spectrum
        >>> sigma, w = marchenko_pastur_spectrum(0.5)
        >>> round(float(w.sum()), 12), round(float((w * sigma ** 2).sum()), 12), round(float(w[0]), 3)
        (1.0, 1.0, 0.5)

    Mass ``1 - ratio`` at 0 plus the Marchenko–Pastur density of ratio ``ratio`` (Gauss–Chebyshev nodes of the
    second kind, exact for the square-root edges), rescaled so that ``rho = int sigma^2 dmu* = 1``.

    References: theory spec B.3 (truncation setup).
    """
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ArgumentError(f"ratio = r*/d must be in (0, 1], got {ratio!r}.")
    count(points, "points", "400")
    lo, hi = (1 - math.sqrt(ratio)) ** 2, (1 + math.sqrt(ratio)) ** 2
    k = torch.arange(1, points + 1, dtype=dtype)
    u = torch.cos(k * math.pi / (points + 1))
    # Gauss–Chebyshev (2nd kind): int sqrt(1-u^2) g(u) du ~ sum w_k g(u_k); the MP density is sqrt(..)/(2 pi ratio x).
    wk = math.pi / (points + 1) * torch.sin(k * math.pi / (points + 1)) ** 2
    x = (lo + hi) / 2 + (hi - lo) / 2 * u
    half = (hi - lo) / 2
    dens_w = wk * half * half / (2 * math.pi * ratio * x)
    dens_w = dens_w / dens_w.sum()  # remove the quadrature's tiny mass error
    sigma = torch.cat([torch.zeros(1, dtype=dtype), x]) if ratio < 1 else x
    weights = torch.cat([torch.tensor([1 - ratio], dtype=dtype), ratio * dens_w]) if ratio < 1 else dens_w
    scale = torch.sqrt((weights * sigma ** 2).sum())
    return sigma / scale, weights


def _orthonormal_polynomials(sigma, weights, M):
    """Values ``P_k(sigma_j)`` ``[M, J]`` of the first ``M`` orthonormal polynomials of the discrete measure
    (Stieltjes three-term recurrence: stable, unlike QR of a Vandermonde matrix)."""
    P = [torch.ones_like(sigma) / weights.sum().sqrt()]
    prev = torch.zeros_like(sigma)
    beta = 0.0
    for _ in range(1, M):
        p = P[-1]
        alpha = (weights * sigma * p * p).sum()
        q = (sigma - alpha) * p - beta * prev
        # Re-orthogonalize once: cheap insurance against round-off in the recurrence.
        for r in P:
            q = q - (weights * q * r).sum() * r
        beta = (weights * q * q).sum().sqrt()
        prev = p
        P.append(q / beta)
    return torch.stack(P)


def spectral_closure(sigma: torch.Tensor, weights: torch.Tensor, s0, *, link: str = "he2", t: float = 6.0,
                     dt: float = 0.01, order: int | None = None, d: int | None = None):
    """Tied gradient flow for a student commuting with the teacher: ``s(sigma, t)`` per teacher eigenvalue, or its
    Galerkin truncation onto the first ``order`` orthonormal polynomials of the teacher's spectral law.

    Example::

        >>> from jacobiscope.theory.aim import marchenko_pastur_spectrum, spectral_closure
        >>> sigma, w = marchenko_pastur_spectrum(0.5, points=60)
        >>> times, loss = spectral_closure(sigma, w, 0.05, t=6.0, dt=0.02)
        >>> round(float(loss[0]), 4), float(loss[-1]) < 0.05 * float(loss[0])      # Phi2 ~ 3/2 rho^2 at S0 ~ 0
        (1.4958, True)

    Arguments:
        sigma, weights: the teacher's spectral law ``mu*`` (atoms and weights, e.g. `marchenko_pastur_spectrum`).
        s0: the student's initial eigenvalue(s) (``S0 = s0 I``: a scalar, or ``[J]`` per atom).
        link: ``"he1"``, ``"he2"``, ``"he3"``.
        t, dt: horizon and RK4 step.
        order: ``M``, the truncation order: ``s(sigma, t) ~ sum_{k<M} c_k(t) P_k(sigma)`` with Galerkin projection
            of the right-hand side; ``None`` solves the closure exactly (one ODE per atom).
        d: include the He2 finite-``d`` term ``(1/d)(12 s^3 - 12 s sigma^2)`` of the gradient (matches SGD at
            finite ``d``); ``None`` is the ``d -> infinity`` (Gaussian) limit.

    Returns:
        ``(times [K], loss [K])`` with the population loss evaluated from ``Q = int s^2 dmu*``,
        ``m = int s sigma dmu*``, ``rho = int sigma^2 dmu*`` (Gaussian-limit formula).

    Dynamics: ``ds/dt = -4 s g(s, sigma)``, ``g = 2 Phi_Q s + Phi_m sigma`` (He2: ``-8 (3Q - rho) s^2 + 16 m sigma s``).

    References: theory spec B.3 (moment hierarchy, spectral closure, truncation order M).
    """
    s = torch.as_tensor(s0, dtype=sigma.dtype, device=sigma.device) * torch.ones_like(sigma)
    rho = (weights * sigma * sigma).sum()

    def loss_of(s_vals):
        Q = (weights * s_vals * s_vals).sum(-1)
        m = (weights * s_vals * sigma).sum(-1)
        return population_loss_from(link, Q, m, rho)

    def field(s_vals):
        Q = (weights * s_vals * s_vals).sum()
        m = (weights * s_vals * sigma).sum()
        phi_q, phi_m = _dphi(link, Q, m, rho)
        g = 2 * phi_q * s_vals + phi_m * sigma
        if d is not None and link == "he2":
            g = g + (12 * s_vals ** 3 - 12 * s_vals * sigma ** 2) / d
        return -4 * s_vals * g

    if order is None:
        state, rhs, values = s, field, (lambda z: z)
    else:
        if isinstance(order, bool) or not isinstance(order, int) or order < 1:
            raise ArgumentError(f"order (M) must be a positive int or None, got {order!r}.")
        P = _orthonormal_polynomials(sigma, weights, order)  # [M, J]
        state = (P * weights * s).sum(-1)

        def values(c):
            return c @ P

        def rhs(c):
            return (P * weights * field(values(c))).sum(-1)

    steps = max(int(round(t / dt)), 1)
    losses = [loss_of(values(state))]
    for _ in range(steps):
        k1 = rhs(state)
        k2 = rhs(state + 0.5 * dt * k1)
        k3 = rhs(state + 0.5 * dt * k2)
        k4 = rhs(state + dt * k3)
        state = state + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        losses.append(loss_of(values(state)))
    times = torch.arange(steps + 1, dtype=sigma.dtype, device=sigma.device) * dt
    return times, torch.stack(losses)


def truncation_errors(orders=(1, 2, 3, 4, 5, 6), *, ratio: float = 0.5, s0: float = 0.05, link: str = "he2",
                      t: float = 6.0, dt: float = 0.01, points: int = 200) -> dict:
    """Relative L2-in-time error of the loss curve of the order-``M`` Galerkin truncation against the exact closure.

    Example::

        >>> from jacobiscope.theory.aim import truncation_errors
        >>> errs = truncation_errors((1, 3), points=40, dt=0.02)
        >>> errs[3] < 0.1 * errs[1]
        True

    Arguments:
        orders: the truncation orders ``M``; ratio, s0, link, t, dt: the setup (spec: Marchenko–Pastur teacher with
        ``r*/d = 1/2`` and ``rho = 1``, ``S0 = 0.05 I``, He2, ``t in [0, 6]``); points: quadrature nodes.

    Returns:
        ``{M: error}`` with ``error = ||loss_M - loss||_2 / ||loss||_2`` over the time grid.

    References: theory spec B.3 (truncation table: 1.2, 4.5e-2, 8.6e-3, 1.5e-3, 2.7e-4, 6.3e-5 for M = 1..6).
    """
    sigma, weights = marchenko_pastur_spectrum(ratio, points)
    _, reference = spectral_closure(sigma, weights, s0, link=link, t=t, dt=dt)
    out = {}
    for M in orders:
        _, loss = spectral_closure(sigma, weights, s0, link=link, t=t, dt=dt, order=M)
        out[M] = float((loss - reference).norm() / reference.norm())
    return out
