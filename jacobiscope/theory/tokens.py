"""Token dynamics of deep linear / unnormalized-softmax attention as particles on the sphere (theory spec, Part A).

Tokens ``x_1..x_n`` on ``S^{d-1}`` move by

    dx_k/dt = P_perp(x_k) (1/n) sum_j h(<x_k, A x_j>) V x_j,     P_perp(x) = I - x x^T,

with ``h(y) = beta y`` (linear self-attention, LSA) or ``h(y) = exp(beta y)`` (unnormalized softmax attention,
USA); ``A`` plays ``Q^T K`` and ``V`` the value matrix. This module integrates the particles (RK4 with
renormalization, or projected Euler for comparison), and in ``d = 2`` for LSA ships the exact reductions:
the Kuramoto–Daido phase equation with pure second-harmonic coupling, and the Ott–Antonsen (OA) equation for
``R_2 = (1/n) sum_j exp(2 i theta_j)``. `classify_regime` names the long-time behaviour: ``"clustering"``,
``"rotating_clusters"``, ``"oscillation"`` or ``"interior_fixed_point"``; `predict_regime` gives the regime the
spec's exact statements predict without simulating, and `regime_table` sets the two side by side for the spec's
verified examples.

Order parameters come from `jacobiscope.dynamics.clusters` (``2 lambda_1 - 1 = |R_2|`` in ``d = 2``).
Everything is batched over leading dimensions of ``A`` / ``V`` and runs on their device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..dynamics.clusters import TokenOrderParameters, leading_axis_rotation, token_order_parameters
from ..errors import ArgumentError, StateError

__all__ = [
    "TOKEN_REGIMES",
    "TokenSimulation",
    "TokenRegime",
    "attention_field",
    "tangent_field",
    "integrate_tokens",
    "simulate",
    "complex_coefficients",
    "phase_velocity",
    "kuramoto_order",
    "oa_rhs",
    "integrate_oa",
    "wrapped_cauchy_phases",
    "hamiltonian_energy",
    "classify_regime",
    "circle_velocity",
    "transverse_exponent",
    "predict_regime",
    "REGIME_EXAMPLES",
    "REGIME_TABLE",
    "regime_table",
    "regime_trajectories",
]

TOKEN_REGIMES = ("clustering", "rotating_clusters", "oscillation", "interior_fixed_point")
_ATTENTIONS = ("linear", "softmax")


# ---------------------------------------------------------------------------------------------------- particles
def attention_field(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, *, attention: str = "linear",
                    beta: float = 1.0) -> torch.Tensor:
    """The unprojected field ``F_k = (1/n) sum_j h(<x_k, A x_j>) V x_j`` for tokens as rows of ``X``.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import attention_field
        >>> X = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
        >>> attention_field(X, torch.eye(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)).tolist()
        [[0.5, 0.0], [0.0, 0.5]]

    Arguments:
        X: tokens ``[..., n, d]`` (rows on the unit sphere).
        A, V: ``[..., d, d]``, broadcast against ``X``'s batch dimensions.
        attention: ``"linear"`` (``h(y) = beta y``) or ``"softmax"`` (``h(y) = exp(beta y)``, no normalization).
        beta: inverse temperature.

    Returns:
        ``[..., n, d]``. LSA uses the matrix form ``beta X A M V^T`` with ``M = X^T X / n`` (``O(n d^2)``, no
        ``n x n`` matrix); USA builds the ``n x n`` weights ``exp(beta X A X^T)``.

    References: theory spec A.1.
    """
    n = X.shape[-2]
    if attention == "linear":
        M = X.mT @ X / n
        return beta * (X @ A @ M @ V.mT)
    if attention == "softmax":
        weights = torch.exp(beta * (X @ A @ X.mT))
        return (weights @ X @ V.mT) / n
    raise ArgumentError(f"attention must be one of {_ATTENTIONS}, got {attention!r}.")


def tangent_field(X, A, V, *, attention: str = "linear", beta: float = 1.0) -> torch.Tensor:
    """The particle velocity ``P_perp(x_k) F_k = F_k - <x_k, F_k> x_k`` (rows of ``X`` on the sphere).

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import tangent_field
        >>> X = torch.tensor([[1.0, 0.0], [0.6, 0.8]], dtype=torch.float64)
        >>> float((tangent_field(X, torch.eye(2).double(), torch.eye(2).double()) * X).sum(-1).abs().max()) < 1e-15
        True

    Arguments and returns as `attention_field`; the result is tangent to the sphere at every token.

    References: theory spec A.1.
    """
    F = attention_field(X, A, V, attention=attention, beta=beta)
    return F - (F * X).sum(-1, keepdim=True) * X


def integrate_tokens(X0, A, V, steps: int, dt: float, *, attention: str = "linear", beta: float = 1.0,
                     method: str = "rk4", record_every: int = 1) -> torch.Tensor:
    """Integrate the particles; returns the trajectory ``[1 + steps // record_every, ..., n, d]``.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import integrate_tokens
        >>> X0 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=torch.float64)
        >>> traj = integrate_tokens(X0, torch.eye(2).double(), torch.eye(2).double(), steps=10, dt=0.1)
        >>> tuple(traj.shape), float((traj.norm(dim=-1) - 1).abs().max()) < 1e-14
        ((11, 3, 2), True)

    Arguments:
        X0: initial tokens ``[..., n, d]`` (normalized here).
        A, V: ``[..., d, d]`` (broadcast with ``X0``'s batch).
        steps, dt: number of steps and step size. Guidance (spec A.5): ``dt <= 0.1 / Lambda`` with
            ``Lambda = beta ||A|| ||V||`` (LSA) or ``beta ||A|| exp(beta ||A||) ||V||`` (USA); validate by halving.
        method: ``"rk4"`` (classical RK4 on the tangent field, every row renormalized after each step: fourth
            order) or ``"euler"`` (projected Euler: a step along the tangent field then renormalization, first
            order; for comparison).
        record_every: keep every this-many steps (``steps`` must be a multiple).

    Returns:
        The recorded states including the initial one.

    References: theory spec A.5 (integrator and its measured orders).
    """
    _check_int(steps, "steps", 1)
    _check_int(record_every, "record_every", 1)
    if steps % record_every:
        raise ArgumentError(f"steps ({steps}) must be a multiple of record_every ({record_every}).")
    if not (isinstance(dt, (int, float)) and not isinstance(dt, bool) and dt > 0):
        raise ArgumentError(f"dt must be a positive number, got {dt!r}.")
    if method not in ("rk4", "euler"):
        raise ArgumentError(f"method must be 'rk4' or 'euler', got {method!r}.")
    if attention not in _ATTENTIONS:
        raise ArgumentError(f"attention must be one of {_ATTENTIONS}, got {attention!r}.")

    def f(Y):
        return tangent_field(Y, A, V, attention=attention, beta=beta)

    X = _normalize_rows(X0)
    frames = [X]
    for step in range(1, steps + 1):
        if method == "rk4":
            k1 = f(X)
            k2 = f(X + 0.5 * dt * k1)
            k3 = f(X + 0.5 * dt * k2)
            k4 = f(X + dt * k3)
            X = X + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        else:
            X = X + dt * f(X)
        # The exact flow stays on the sphere; renormalizing removes the O(dt^5) radial drift of each step.
        X = _normalize_rows(X)
        if step % record_every == 0:
            frames.append(X)
    return torch.stack(frames)


@dataclass
class TokenSimulation:
    """What `simulate` returns.

    Attributes:
        times: ``[T]`` recorded times.
        states: trajectory ``[T, *batch, n, d]``.
        order: `TokenOrderParameters` of every recorded state (batch shape ``[T, *batch]``).
        R2: ``[T, *batch]`` complex Kuramoto–Daido order parameter ``(1/n) sum_j exp(2 i theta_j)``, ``d = 2`` only
            (``None`` otherwise); ``|R2| = 2 lambda_1 - 1``.
        axis_speed: ``[T-1, *batch]`` angular speed of the leading axis (signed mean direction for softmax).
        attention, beta, dt: as passed.
    """

    times: torch.Tensor
    states: torch.Tensor
    order: TokenOrderParameters
    R2: torch.Tensor | None
    axis_speed: torch.Tensor
    attention: str
    beta: float
    dt: float


def simulate(A, V, n: int, d: int, steps: int, dt: float, attention: str = "linear", beta: float = 1.0,
             seed: int = 0, *, x0: torch.Tensor | None = None, method: str = "rk4", record_every: int = 1,
             dtype: torch.dtype = torch.float64) -> TokenSimulation:
    """Simulate ``n`` tokens on ``S^{d-1}`` from isotropic random initial data and measure their order parameters.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import simulate
        >>> sim = simulate(torch.eye(3), torch.eye(3), n=8, d=3, steps=40, dt=0.25)   # A = V = I clusters (Type 1)
        >>> round(float(sim.order.top_eigenvalue[-1]), 3), int(sim.order.cluster_count[-1])
        (1.0, 1)

    Arguments:
        A, V: ``[..., d, d]`` tensors (or nested lists); leading dimensions are a batch of systems, each with its
            own tokens. Their device is used.
        n, d: tokens and dimension.
        steps, dt, method, record_every: as `integrate_tokens`.
        attention: ``"linear"`` (LSA) or ``"softmax"`` (USA).
        beta: inverse temperature.
        seed: seed of the Gaussian initial tokens (normalized: uniform on the sphere).
        x0: optional initial tokens ``[*batch, n, d]`` instead of the random ones.
        dtype: computation dtype (float64 default: the spec's checks are at 1e-8 and below).

    Returns:
        `TokenSimulation`.

    References: theory spec A.1, A.5.
    """
    A, V = _matrices(A, V, d, dtype)
    _check_int(n, "n", 1)
    batch = torch.broadcast_shapes(A.shape[:-2], V.shape[:-2])
    if x0 is None:
        generator = torch.Generator(device="cpu").manual_seed(int(seed))
        # Draw on CPU with a seeded generator so the same seed gives the same tokens on every device.
        x0 = torch.randn(*batch, n, d, generator=generator, dtype=dtype).to(A.device)
    else:
        if not isinstance(x0, torch.Tensor) or x0.shape[-2:] != (n, d):
            raise StateError(f"x0 must be a tensor [*batch, n={n}, d={d}], got "
                             f"{tuple(x0.shape) if isinstance(x0, torch.Tensor) else type(x0).__name__}.")
        x0 = x0.to(device=A.device, dtype=dtype)
    states = integrate_tokens(x0, A, V, steps, dt, attention=attention, beta=beta, method=method,
                              record_every=record_every)
    times = torch.arange(states.shape[0], dtype=dtype, device=A.device) * (dt * record_every)
    order = token_order_parameters(states)
    R2 = kuramoto_order(states) if d == 2 else None
    speed = leading_axis_rotation(states, signed=(attention == "softmax"), dt=dt * record_every)
    return TokenSimulation(times, states, order, R2, speed, attention, float(beta), float(dt))


# ---------------------------------------------------------------------------------------------------- d = 2
def complex_coefficients(B: torch.Tensor):
    """``(p, q)`` with ``B w = p w + q conj(w)`` for a real 2x2 ``B`` acting on ``w = x + i y``.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import complex_coefficients
        >>> p, q = complex_coefficients(torch.tensor([[1.0, -2.0], [2.0, -1.0]]))
        >>> complex(p), complex(q)
        (2j, (1+0j))

    Arguments:
        B: ``[..., 2, 2]`` real.

    Returns:
        ``p = ((b11+b22) + i(b21-b12))/2`` and ``q = ((b11-b22) + i(b21+b12))/2``, complex ``[...]``.

    References: theory spec A.2.
    """
    b11, b12, b21, b22 = B[..., 0, 0], B[..., 0, 1], B[..., 1, 0], B[..., 1, 1]
    return torch.complex((b11 + b22) / 2, (b21 - b12) / 2), torch.complex((b11 - b22) / 2, (b21 + b12) / 2)


def _omega_kappa(Z, A, V):
    alpha, alpha_p = complex_coefficients(A)
    nu, nu_p = complex_coefficients(V)
    Zc = Z.conj()
    omega = 0.5 * (nu * alpha.conj() + nu_p * alpha_p.conj() + Z * nu * alpha_p.conj() + Zc * nu_p * alpha.conj())
    kappa = 0.5 * (nu * alpha_p + nu_p * alpha + Z * nu * alpha + Zc * nu_p * alpha_p)
    return omega, kappa


def kuramoto_order(x: torch.Tensor) -> torch.Tensor:
    """``R_2 = (1/n) sum_j exp(2 i theta_j)`` of ``d = 2`` tokens ``[..., n, 2]`` (normalized here), complex ``[...]``.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import kuramoto_order
        >>> complex(kuramoto_order(torch.tensor([[1.0, 0.0], [-3.0, 0.0]], dtype=torch.float64)))
        (1+0j)

    Equals ``(M11 - M22) + 2 i M12`` of the second-moment matrix, so ``|R_2| = 2 lambda_1 - 1``.

    References: theory spec A.2, A.5.
    """
    if x.shape[-1] != 2:
        raise StateError(f"kuramoto_order needs d = 2 tokens [..., n, 2], got shape {tuple(x.shape)}.")
    u = _normalize_rows(x)
    w = torch.complex(u[..., 0], u[..., 1])
    return (w * w).mean(-1)


def phase_velocity(theta: torch.Tensor, A, V, beta: float = 1.0) -> torch.Tensor:
    """Kuramoto–Daido phase form of LSA in ``d = 2``: ``theta_k' = beta Im[omega(R_2) + kappa(R_2) e^{-2 i theta_k}]``.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import phase_velocity, tangent_field
        >>> theta = torch.tensor([0.1, 1.3, 2.0, 4.4], dtype=torch.float64)
        >>> A = torch.tensor([[1.0, -0.3], [0.7, 0.5]], dtype=torch.float64); V = torch.tensor([[0.2, 1.0], [-0.4, 0.9]], dtype=torch.float64)
        >>> X = torch.stack([theta.cos(), theta.sin()], -1)
        >>> direct = (tangent_field(X, A, V) * torch.stack([-theta.sin(), theta.cos()], -1)).sum(-1)
        >>> float((phase_velocity(theta, A, V) - direct).abs().max()) < 1e-14
        True

    Arguments:
        theta: angles ``[..., n]``; A, V: ``[..., 2, 2]`` real; beta: inverse temperature.

    Returns:
        ``[..., n]`` angular velocities, with ``omega``, ``kappa`` of theory spec A.2.

    References: theory spec A.2 (Kuramoto–Sakaguchi coupling with lag arg(nu alpha) plus a reflection coupling).
    """
    A, V = _matrices(A, V, 2, theta.dtype, device=theta.device)
    R2 = torch.exp(2j * theta.to(torch.promote_types(theta.dtype, torch.float32))).mean(-1)
    omega, kappa = _omega_kappa(R2, A, V)
    return beta * (omega.unsqueeze(-1) + kappa.unsqueeze(-1) * torch.exp(-2j * theta)).imag


def oa_rhs(Z: torch.Tensor, A, V, beta: float = 1.0) -> torch.Tensor:
    """Ott–Antonsen right-hand side ``Z' = 2 i beta Im(omega(Z)) Z + beta (kappa(Z) - conj(kappa(Z)) Z^2)``.

    Example (``V = I`` closed form ``Z' = (beta/2)(1 - |Z|^2)(alpha' + conj(alpha) Z)``)::

        >>> import torch
        >>> from jacobiscope.theory.tokens import oa_rhs, complex_coefficients
        >>> A = torch.tensor([[-1.0, 0.3], [0.2, -2.0]], dtype=torch.float64); Z = torch.tensor(0.2 + 0.3j, dtype=torch.complex128)
        >>> a, ap = complex_coefficients(A)
        >>> closed = 0.5 * (1 - Z.abs() ** 2) * (ap + a.conj() * Z)
        >>> float((oa_rhs(Z, A, torch.eye(2, dtype=torch.float64)) - closed).abs()) < 1e-15
        True

    Arguments:
        Z: complex ``[...]`` (the centre of the wrapped-Cauchy law of doubled angles, ``|Z| <= 1``).
        A, V: ``[..., 2, 2]`` real; beta: inverse temperature.

    Returns:
        complex ``[...]``. Exact for ``n -> infinity`` wrapped-Cauchy initial data (and for splay-initialized
        particles up to ``(1-|zeta|^2)|zeta|^{n-1}``); the unit circle (clustered states) is invariant.

    References: theory spec A.3; E. Ott, T. M. Antonsen, Chaos 18 (2008).
    """
    A, V = _matrices(A, V, 2, Z.real.dtype, device=Z.device)
    omega, kappa = _omega_kappa(Z, A, V)
    return 2j * beta * omega.imag * Z + beta * (kappa - kappa.conj() * Z * Z)


def integrate_oa(Z0, A, V, steps: int, dt: float, beta: float = 1.0, record_every: int = 1) -> torch.Tensor:
    """RK4 integration of the OA equation; returns ``[1 + steps // record_every, ...]`` complex.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import integrate_oa
        >>> Z = integrate_oa(torch.tensor(0.3 + 0.1j, dtype=torch.complex128), torch.diag(torch.tensor([-1.0, -2.0])), torch.eye(2), steps=400, dt=0.1)
        >>> round(complex(Z[-1]).real, 6), round(abs(complex(Z[-1]).imag), 6)   # interior fixed point Z* = 1/3
        (0.333333, 0.0)

    Arguments:
        Z0: complex initial value(s) ``[...]`` (a Python complex is accepted); A, V: ``[..., 2, 2]``;
        steps, dt, record_every: as `integrate_tokens`; beta: inverse temperature.

    References: theory spec A.3.
    """
    _check_int(steps, "steps", 1)
    _check_int(record_every, "record_every", 1)
    if steps % record_every:
        raise ArgumentError(f"steps ({steps}) must be a multiple of record_every ({record_every}).")
    if not isinstance(Z0, torch.Tensor):
        device = A.device if isinstance(A, torch.Tensor) else None
        Z0 = torch.as_tensor(Z0, dtype=torch.complex128, device=device)
    if not Z0.is_complex():
        Z0 = Z0.to(torch.complex128)
    A, V = _matrices(A, V, 2, Z0.real.dtype, device=Z0.device)
    batch = torch.broadcast_shapes(Z0.shape, A.shape[:-2], V.shape[:-2])
    Z = Z0.expand(batch).clone()
    frames = [Z]
    for step in range(1, steps + 1):
        k1 = oa_rhs(Z, A, V, beta)
        k2 = oa_rhs(Z + 0.5 * dt * k1, A, V, beta)
        k3 = oa_rhs(Z + 0.5 * dt * k2, A, V, beta)
        k4 = oa_rhs(Z + dt * k3, A, V, beta)
        Z = Z + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        if step % record_every == 0:
            frames.append(Z)
    return torch.stack(frames)


def wrapped_cauchy_phases(zeta, n: int, *, splay: bool = True, seed: int = 0,
                          dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """Angles ``theta [..., n]`` whose doubled angles are wrapped-Cauchy with centre ``zeta`` (OA initial data).

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import wrapped_cauchy_phases
        >>> theta = wrapped_cauchy_phases(0.4 + 0.3j, 64)
        >>> abs(complex(torch.exp(2j * theta).mean()) - (0.4 + 0.3j)) < 1e-12
        True

    Arguments:
        zeta: complex centre(s) ``|zeta| < 1`` (Python complex or complex tensor ``[...]``).
        n: tokens.
        splay: ``True``: uniform angles ``u_k = 2 pi (k + 1/2) / n`` (first moment exact up to
            ``(1-|zeta|^2)|zeta|^{n-1}``); ``False``: iid uniform (seeded, drawn on the CPU).
        dtype, device: of the result (default: float64 on ``zeta``'s device, or the CPU).

    Returns:
        ``theta = arg(M(e^{iu})) / 2`` with the Möbius map ``M(w) = (w + zeta) / (1 + conj(zeta) w)``.

    References: theory spec A.3 (sampling initial data).
    """
    if device is None:
        device = zeta.device if isinstance(zeta, torch.Tensor) else "cpu"
    zeta = torch.as_tensor(zeta, dtype=torch.complex128 if dtype == torch.float64 else torch.complex64, device=device)
    if bool((zeta.abs() >= 1).any()):
        raise ArgumentError(f"zeta must lie in the open unit disk, got |zeta| = {zeta.abs().max().item():.4g}.")
    if splay:
        u = 2 * math.pi * (torch.arange(n, dtype=dtype, device=device) + 0.5) / n
    else:
        u = 2 * math.pi * torch.rand(n, generator=torch.Generator().manual_seed(int(seed)), dtype=dtype).to(device)
    w = torch.exp(1j * u)
    z = zeta.unsqueeze(-1)
    return torch.angle((w + z) / (1 + z.conj() * w)) / 2


def hamiltonian_energy(Z: torch.Tensor, a: float, b: float) -> torch.Tensor:
    """Conserved quantity of the reversible case ``A = I``, ``V = [[a, b], [-b, -a]]`` of the OA flow.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import integrate_oa, hamiltonian_energy
        >>> V = torch.tensor([[0.5, 1.0], [-1.0, -0.5]], dtype=torch.float64)
        >>> Z = integrate_oa(0.3 + 0.1j, torch.eye(2, dtype=torch.float64), V, steps=200, dt=0.01)
        >>> E = hamiltonian_energy(Z, 0.5, 1.0); float((E - E[0]).abs().max()) < 1e-8
        True

    Arguments:
        Z: complex OA state(s), ``|Z| < 1``; a, b: the entries of ``V``.

    Returns:
        ``E(Z) = 2 (a Im Z + b) / (1 - |Z|^2)^2 - b / (1 - |Z|^2)`` (real, shape of ``Z``).

    References: theory spec A.4 item 4 (the flow preserves ``dx dy / (1 - |Z|^2)^3``).
    """
    s = 1.0 - Z.abs() ** 2
    return 2.0 * (a * Z.imag + b) / (s * s) - b / s


# ---------------------------------------------------------------------------------------------------- regimes
@dataclass
class TokenRegime:
    """What `classify_regime` returns.

    Attributes:
        regime: one of ``TOKEN_REGIMES``; a batch gives a nested list of names.
        evidence: plain numbers (lists for a batch): ``order_limit`` (late mean of ``|R_2|``, or of the
            nematic / polar order for particles), ``order_min`` / ``order_std`` over the late window,
            ``arg_drift`` (late mean angular speed of ``arg R_2`` / of the axis), ``period`` (rotation or oscillation period; 0 if none),
            ``fixed_point`` (final ``R_2`` as ``[re, im]``, ``d = 2`` only), ``method``, ``reason``.
        trajectory: the ``R_2`` series (OA) or the `TokenSimulation` (particles).
    """

    regime: object
    evidence: dict = field(default_factory=dict)
    trajectory: object = None


def classify_regime(A, V, *, beta: float = 1.0, attention: str = "linear", z0=0.3 + 0.1j, horizon: float = 400.0,
                    dt: float = 0.02, window: float = 0.25, radius_tol: float = 1e-2, drift_tol: float = 1e-3,
                    oscillation_tol: float = 1e-3,
                    n: int = 64, seed: int = 0, method: str | None = None) -> TokenRegime:
    """Name the long-time regime of the token dynamics: clustering, rotating clusters, oscillation, interior point.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import classify_regime
        >>> r = classify_regime(torch.eye(2), torch.tensor([[1.1, -0.5], [0.5, 0.9]]), horizon=60, dt=0.02)
        >>> r.regime, round(r.evidence["period"], 3)           # Type 2, predicted period 6.41275
        ('rotating_clusters', 6.413)

    Arguments:
        A, V: ``[..., d, d]``; a leading batch is classified element-wise (one integration).
        beta, attention: the dynamics.
        z0: initial ``R_2`` (complex, or a complex tensor broadcasting with the batch) for the OA method.
        horizon, dt: integration time and RK4 step. The verdict uses the last ``window`` fraction.
        radius_tol: clustered when the late ``|R_2|`` (or ``2 lambda_1 - 1``) stays above ``1 - radius_tol``;
            the slow algebraic approach at degenerate points (e.g. ``V = diag(0, -1)``: 0.995 at t = 400) needs it.
        drift_tol: a clustered state rotates when its late angular speed exceeds this (rad per unit time).
        oscillation_tol: an unclustered state oscillates when the late standard deviation of the order
            parameter exceeds this (a slow spiral into an interior point must have settled below it).
        n, seed: tokens and initial seed of the particle method.
        method: ``"oa"`` (default for LSA in ``d = 2``: exact ``n -> infinity`` reduction) or ``"particles"``
            (default otherwise: RK4 particles; order parameter the nematic order ``(d lambda_1 - 1)/(d - 1)`` for
            linear attention (``= |R_2|`` in ``d = 2``), the polar order for softmax; leading-axis rotation).

    Returns:
        `TokenRegime`. Rules on the late window: ``order_min > 1 - radius_tol`` is clustered: rotating when
        ``|arg drift| > drift_tol`` (period ``2 pi / |drift|`` of ``arg R_2``, measured between its first and last
        crossing of a multiple of ``2 pi``), else ``"clustering"``; otherwise ``order_std > oscillation_tol``
        is ``"oscillation"`` (period from upward crossings of the mean), else
        ``"interior_fixed_point"``.

    References: theory spec A.4 (regime definitions, verified examples), A.5 (high-d order parameters).
    """
    d = (A.shape[-1] if isinstance(A, torch.Tensor) else len(A))
    if method is None:
        method = "oa" if (d == 2 and attention == "linear") else "particles"
    if method not in ("oa", "particles"):
        raise ArgumentError(f"method must be 'oa' or 'particles', got {method!r}.")
    if method == "oa" and (d != 2 or attention != "linear"):
        raise ArgumentError("method='oa' is exact only for linear attention in d = 2 (softmax attention has odd "
                            "harmonics and no OA reduction); use method='particles'.")
    steps = max(int(round(horizon / dt)), 4)
    A, V = _matrices(A, V, d, torch.float64)
    if method == "oa":
        Z = integrate_oa(torch.as_tensor(z0, dtype=torch.complex128, device=A.device), A, V, steps, dt, beta)
        radius = Z.abs()
        phase = _unwrap(torch.angle(Z))
        series, record_dt, full_turn = Z, dt, 2 * math.pi
    else:
        sim = simulate(A, V, n, d, steps, dt, attention, beta, seed)
        # nematic order (d lambda_1 - 1)/(d - 1) is |R_2| in d = 2 and runs from 0 (isotropic) to 1 (one axis).
        radius = sim.order.nematic_order if attention == "linear" else sim.order.polar_order
        # An axis returns after pi (LSA, sign-blind), a signed cluster after 2 pi.
        phase = torch.cumsum(torch.cat([torch.zeros_like(sim.axis_speed[:1]), sim.axis_speed * dt]), 0)
        series, record_dt, full_turn = sim, dt, (math.pi if attention == "linear" else 2 * math.pi)
    start = int(radius.shape[0] * (1 - window))
    late_r = radius[start:]
    late_phase = phase[start:]
    t_late = torch.arange(late_r.shape[0], dtype=torch.float64, device=late_r.device) * record_dt
    drift = (late_phase[-1] - late_phase[0]) / (t_late[-1] - t_late[0])
    r_mean, r_min, r_std = late_r.mean(0), late_r.amin(0), late_r.std(0)

    flat = lambda x: x.reshape(-1).tolist()  # noqa: E731
    names, periods = [], []
    for i, (mean, low, std, w) in enumerate(zip(flat(r_mean), flat(r_min), flat(r_std), flat(drift))):
        column = (lambda s: s.reshape(s.shape[0], -1)[:, i])
        if low > 1 - radius_tol:
            if abs(w) > drift_tol:
                names.append("rotating_clusters")
                periods.append(_crossing_period(column(late_phase) * (1 if w > 0 else -1), full_turn, record_dt,
                                                fallback=full_turn / abs(w)))
            else:
                names.append("clustering")
                periods.append(0.0)
        elif std > oscillation_tol:
            names.append("oscillation")
            r = column(late_r)
            periods.append(_crossing_period(r - r.mean(), None, record_dt, fallback=0.0))
        else:
            names.append("interior_fixed_point")
            periods.append(0.0)
    shape = r_mean.shape
    regime = names[0] if len(shape) == 0 else _nest(names, shape)
    evidence = {
        "method": method,
        "order_limit": r_mean.tolist(), "order_min": r_min.tolist(), "order_std": r_std.tolist(),
        "arg_drift": drift.tolist(), "period": periods[0] if len(shape) == 0 else _nest(periods, shape),
        "horizon": float(horizon), "dt": float(dt),
    }
    if method == "oa":
        last = Z[-1]
        evidence["fixed_point"] = torch.stack([last.real, last.imag], -1).tolist()
    evidence["reason"] = (f"late |R_2| (or nematic/polar order) min {r_min.min().item():.4g}, arg drift "
                          f"{drift.abs().max().item():.3g} rad/time over the last {window:.0%} of t = {horizon:g}")
    return TokenRegime(regime, evidence, series)


# ---------------------------------------------------------------------------------------------------- predictions
def _unit_pair(psi):
    half = psi / 2
    x = torch.stack([torch.cos(half), torch.sin(half)], -1)
    return x, torch.stack([-torch.sin(half), torch.cos(half)], -1)


def _quad(M, u, v):
    return (u * (v @ M.mT)).sum(-1)


def circle_velocity(psi: torch.Tensor, A, V, beta: float = 1.0) -> torch.Tensor:
    """Speed ``psi'`` of a single cluster ``Z = e^{i psi}`` moving along the unit circle (LSA, ``d = 2``).

    Example (``A = I``, ``V = [[1 + delta, -s], [s, 1 - delta]]``: ``psi' = 2 beta (s - delta sin psi)``)::

        >>> import math, torch
        >>> from jacobiscope.theory.tokens import circle_velocity
        >>> psi = torch.tensor([0.0, math.pi / 2], dtype=torch.float64)
        >>> [round(v, 12) for v in circle_velocity(psi, torch.eye(2), [[1.1, -0.5], [0.5, 0.9]]).tolist()]
        [1.0, 0.8]

    Arguments:
        psi: doubled angles ``[...]`` (the cluster's axis is ``x = e^{i psi / 2}``); A, V: ``[2, 2]``; beta.

    Returns:
        ``2 beta (x^T A x)(x_perp^T V x)``, ``x_perp = i x``: the OA flow restricted to the invariant circle.

    References: theory spec A.3 (on the circle).
    """
    A, V = _matrices(A, V, 2, psi.dtype, device=psi.device)
    x, xp = _unit_pair(psi)
    return 2 * beta * _quad(A, x, x) * _quad(V, xp, x)


def transverse_exponent(psi: torch.Tensor, A, V, beta: float = 1.0) -> torch.Tensor:
    """Transverse (clustering) exponent ``lambda_perp`` of a one-cluster state at ``x = e^{i psi / 2}``.

    Example (``A = V = I``: every cluster attracts at rate ``beta``)::

        >>> import torch
        >>> from jacobiscope.theory.tokens import transverse_exponent
        >>> transverse_exponent(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.eye(2), torch.eye(2)).tolist()
        [-1.0, -1.0]

    Returns:
        ``beta [(x_perp^T V x)(x_perp^T A x) - (x^T V x)(x^T A x)]``; a cluster (fixed or rotating) attracts when
        its time average along the cluster's orbit is negative.

    References: theory spec A.3 (transverse exponent).
    """
    A, V = _matrices(A, V, 2, psi.dtype, device=psi.device)
    x, xp = _unit_pair(psi)
    return beta * (_quad(V, xp, x) * _quad(A, xp, x) - _quad(V, x, x) * _quad(A, x, x))


def predict_regime(A, V, *, beta: float = 1.0, z0=0.3 + 0.1j, grid: int = 4096, tol: float = 1e-12) -> TokenRegime:
    """The regime the spec's exact statements predict for LSA in ``d = 2`` (no simulation), with the rule used.

    Example::

        >>> from jacobiscope.theory.tokens import predict_regime
        >>> p = predict_regime([[2.0, 0.0], [0.0, 1.0]], [[0.5, -1.0], [1.0, 0.5]])
        >>> p.regime, round(p.evidence["period"], 5), p.evidence["mean_transverse_exponent"] < 0   # spec: 2.22144
        ('rotating_clusters', 2.22144, True)

    Rules, first match wins (theory spec A.4):

    1. ``V = I``: ``Z* = -alpha' / conj(alpha)``. ``tr A > 0`` or ``det A <= 0``: clustering. ``sym(A)`` negative
       definite: interior fixed point ``Z*``. ``tr A < 0``, ``det A > 0``, ``sym(A)`` indefinite: interior
       (attracting focus; an orbit may hit the circle first, basin-dependent). ``tr A = 0``, ``det A > 0``: circles
       about ``Z*``; the one through ``z0`` oscillates (with the spec's period) if it stays inside the disk, else
       clusters.
    2. ``A = I``, ``V`` symmetric (top eigenvalue ``lambda_1``): ``lambda_1 >= 0`` clustering (algebraic approach at
       ``0``), ``lambda_1 < 0`` interior ``Z* = e^{2 i phi} (lambda_1 - lambda_2) / |lambda_1 + lambda_2|``
       (``phi`` the top eigenvector's angle).
    3. ``A = I``, ``V = [[a, b], [-b, -a]]``: ``|a| < b`` a centre family (oscillation), else clustering.
    4. Otherwise, the dynamics on the invariant circle: if ``psi'`` never vanishes and the time-averaged
       transverse exponent is negative, a rotating cluster with period ``int dpsi / |psi'|``; if some zero of
       ``psi'`` is stable along the circle with ``lambda_perp < 0``, clustering; else ``None`` (not covered).

    Arguments:
        A, V: real ``[2, 2]`` (a single system); beta: inverse temperature; z0: the initial ``R_2`` (used only by
        the basin-dependent rule 1 cases); grid: quadrature points on the circle; tol: what counts as zero.

    Returns:
        `TokenRegime` with ``regime`` (one of ``TOKEN_REGIMES`` or ``None``) and evidence ``rule``,
        ``fixed_point`` (``[re, im]`` or ``None``), ``period`` (0 if none), ``mean_transverse_exponent`` (rotating
        cases), ``basin_dependent``.

    References: theory spec A.4 (exact statements 1-4).
    """
    A, V = _matrices(A, V, 2, torch.float64)
    if A.dim() != 2 or V.dim() != 2:
        raise ArgumentError("predict_regime takes one system: A and V of shape [2, 2] (no batch).")
    if abs(beta) <= 0:
        raise ArgumentError(f"beta must be non-zero, got {beta!r}.")
    eye = torch.eye(2, dtype=torch.float64, device=A.device)
    z0 = complex(z0)
    alpha, alpha_p = (complex(c) for c in complex_coefficients(A))
    evidence = {"rule": None, "fixed_point": None, "period": 0.0, "basin_dependent": False}

    def done(regime, rule, **extra):
        evidence.update(rule=rule, **extra)
        return TokenRegime(regime, evidence, None)

    def close(M, N):
        return float((M - N).abs().max()) <= tol

    if close(V, eye):
        tr, det = float(A.trace()), float(torch.linalg.det(A))
        zstar = -alpha_p / alpha.conjugate() if abs(alpha) > tol else None
        point = [zstar.real, zstar.imag] if zstar is not None else None
        sym_eigs = torch.linalg.eigvalsh((A + A.T) / 2)
        if tr > tol or det <= tol:
            return done("clustering", "V = I and (tr A > 0 or det A <= 0): every orbit but Z* reaches the circle")
        if float(sym_eigs.max()) < -tol:
            return done("interior_fixed_point", "V = I and sym(A) negative definite: global convergence to Z*",
                        fixed_point=point)
        if tr < -tol:
            return done("interior_fixed_point", "V = I, tr A < 0 < det A, sym(A) indefinite: Z* is an attracting "
                        "focus (an orbit may reach the circle first)", fixed_point=point, basin_dependent=True)
        r = abs(z0 - zstar)
        if abs(zstar) + r < 1:
            c = abs(float(A[1, 0] - A[0, 1])) / 2
            root = (1 - abs(zstar) ** 2 - r * r) ** 2 - 4 * r * r * abs(zstar) ** 2
            period = 4 * math.pi / (abs(beta) * c * math.sqrt(root))
            return done("oscillation", "V = I, tr A = 0 < det A: the orbit through z0 is a circle about Z* inside "
                        "the disk", fixed_point=point, period=period, basin_dependent=True)
        return done("clustering", "V = I, tr A = 0 < det A: the circle about Z* through z0 leaves the disk",
                    fixed_point=point, basin_dependent=True)
    if close(A, eye) and close(V, V.T):
        lam, vec = torch.linalg.eigh(V)
        l1, l2 = float(lam[1]), float(lam[0])
        phi = math.atan2(float(vec[1, 1]), float(vec[0, 1]))
        axis = [math.cos(2 * phi), math.sin(2 * phi)]
        if l1 > tol:
            return done("clustering", "A = I, V symmetric, lambda_1 > 0: clustering onto the top eigen-axis",
                        fixed_point=axis if l1 - l2 > tol else None)
        if l1 >= -tol:
            return done("clustering", "A = I, V symmetric, lambda_1 = 0: algebraic (slow) approach to the circle",
                        fixed_point=axis if l1 - l2 > tol else None)
        zstar = complex(math.cos(2 * phi), math.sin(2 * phi)) * (l1 - l2) / abs(l1 + l2)
        return done("interior_fixed_point", "A = I, V symmetric, lambda_1 < 0: interior fixed point",
                    fixed_point=[zstar.real, zstar.imag])
    a, b = float(V[0, 0]), float(V[0, 1])
    if close(A, eye) and close(V, torch.tensor([[a, b], [-b, -a]], dtype=V.dtype, device=V.device)) and abs(b) > tol:
        if abs(a) < b:
            return done("oscillation", "A = I, V = [[a, b], [-b, -a]] with |a| < b: Hamiltonian centre family")
        return done("clustering", "A = I, V = [[a, b], [-b, -a]] with |a| >= |b|: no interior centre")
    psi = torch.arange(grid, dtype=torch.float64, device=A.device) * (2 * math.pi / grid)
    speed = circle_velocity(psi, A, V, beta)
    lam_perp = transverse_exponent(psi, A, V, beta)
    if bool((speed > tol).all()) or bool((speed < -tol).all()):
        # Periodic integrand: the trapezoidal rule on a uniform grid converges spectrally.
        dt = (2 * math.pi / grid) / speed.abs()
        period = float(dt.sum())
        mean_exp = float((lam_perp * dt).sum()) / period
        if mean_exp < 0:
            return done("rotating_clusters", "circle: psi' never vanishes and the mean transverse exponent is < 0",
                        period=period, mean_transverse_exponent=mean_exp)
        return done(None, "circle: psi' never vanishes but the rotating cluster repels (mean exponent >= 0)",
                    period=period, mean_transverse_exponent=mean_exp)
    slope = (torch.roll(speed, -1) - torch.roll(speed, 1)) / (4 * math.pi / grid)
    crossing = (speed > 0) & (torch.roll(speed, -1) <= 0)
    stable = crossing & (lam_perp < 0) & (slope < 0)
    if bool(stable.any()):
        return done("clustering", "circle: psi' has a zero that is stable along the circle with lambda_perp < 0",
                    fixed_point=None, basin_dependent=True)
    return done(None, "not covered by the spec's exact statements")


# The spec's verified examples (A.4), beta = 1: (label, A, V, regime the spec reports). Predictions come from
# `predict_regime`; the reported regime is what the spec's long runs found.
REGIME_TABLE = (
    ("V=I, A=diag(1, 0.5) (tr>0)", [[1.0, 0.0], [0.0, 0.5]], [[1.0, 0.0], [0.0, 1.0]], "clustering"),
    ("V=I, A=diag(1, -2) (det<0)", [[1.0, 0.0], [0.0, -2.0]], [[1.0, 0.0], [0.0, 1.0]], "clustering"),
    ("V=I, A=[[1,-2],[2,-1]] (tr=0)", [[1.0, -2.0], [2.0, -1.0]], [[1.0, 0.0], [0.0, 1.0]], "clustering"),
    ("V=I, A=diag(-1, -2)", [[-1.0, 0.0], [0.0, -2.0]], [[1.0, 0.0], [0.0, 1.0]], "interior_fixed_point"),
    ("V=I, A=-I+0.5J", [[-1.0, -0.5], [0.5, -1.0]], [[1.0, 0.0], [0.0, 1.0]], "interior_fixed_point"),
    ("V=I, A=[[0.5,-2],[2,-1]]", [[0.5, -2.0], [2.0, -1.0]], [[1.0, 0.0], [0.0, 1.0]], "interior_fixed_point"),
    ("A=I, V=diag(1, -2)", [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, -2.0]], "clustering"),
    ("A=I, V=diag(-0.5, -1)", [[1.0, 0.0], [0.0, 1.0]], [[-0.5, 0.0], [0.0, -1.0]], "interior_fixed_point"),
    ("A=I, V=-I", [[1.0, 0.0], [0.0, 1.0]], [[-1.0, 0.0], [0.0, -1.0]], "interior_fixed_point"),
    ("A=I, V=diag(0, -1)", [[1.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [0.0, -1.0]], "clustering"),
    ("A=I, V=[[1.1,-.5],[.5,.9]]", [[1.0, 0.0], [0.0, 1.0]], [[1.1, -0.5], [0.5, 0.9]], "rotating_clusters"),
    ("A=I, V=[[1.5,-.3],[.3,.5]]", [[1.0, 0.0], [0.0, 1.0]], [[1.5, -0.3], [0.3, 0.5]], "clustering"),
    ("A=diag(2,1), V=.5I+J", [[2.0, 0.0], [0.0, 1.0]], [[0.5, -1.0], [1.0, 0.5]], "rotating_clusters"),
    ("A=I, V=[[.5,1],[-1,-.5]]", [[1.0, 0.0], [0.0, 1.0]], [[0.5, 1.0], [-1.0, -0.5]], "oscillation"),
    ("A=I, V=[[1,.5],[-.5,-1]]", [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.5], [-0.5, -1.0]], "clustering"),
)

# One representative (A, V) per regime, from the table above: what the phase portraits show.
REGIME_EXAMPLES = {
    "clustering": ([[1.0, 0.0], [0.0, 0.5]], [[1.0, 0.0], [0.0, 1.0]]),
    "rotating_clusters": ([[1.0, 0.0], [0.0, 1.0]], [[1.1, -0.5], [0.5, 0.9]]),
    "oscillation": ([[1.0, 0.0], [0.0, 1.0]], [[0.5, 1.0], [-1.0, -0.5]]),
    "interior_fixed_point": ([[-1.0, 0.0], [0.0, -2.0]], [[1.0, 0.0], [0.0, 1.0]]),
}


def regime_table(rows=REGIME_TABLE, *, beta: float = 1.0, z0=0.3 + 0.1j, horizon: float = 400.0,
                 dt: float = 0.05) -> list:
    """Predicted (`predict_regime`) against found (`classify_regime`, one batched OA run) for each ``(A, V)``.

    Example::

        >>> from jacobiscope.theory.tokens import REGIME_TABLE, regime_table
        >>> rows = regime_table(REGIME_TABLE[10:11], horizon=60.0)
        >>> r = rows[0]
        >>> r["predicted"], r["found"], round(r["found_period"], 3), round(r["predicted_period"], 5)
        ('rotating_clusters', 'rotating_clusters', 6.413, 6.41275)

    Arguments:
        rows: ``(label, A, V, reported)`` tuples (default: the spec's verified examples, `REGIME_TABLE`).
        beta, z0, horizon, dt: as `classify_regime` (the spec: ``z0 = 0.3 + 0.1i``, ``T = 400``).

    Returns:
        One dict per row: ``label``, ``reported`` (the spec's long-run result), ``predicted`` and ``rule``, ``found``,
        ``agree`` (``predicted == found``), ``predicted_fixed_point`` / ``found_fixed_point`` (complex or None),
        ``predicted_period`` / ``found_period``, ``order_limit``, ``order_std``, ``arg_drift``.

    References: theory spec A.4.
    """
    rows = list(rows)
    if not rows:
        raise ArgumentError("regime_table needs at least one (label, A, V, reported) row.")
    A = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    V = torch.tensor([r[2] for r in rows], dtype=torch.float64)
    found = classify_regime(A, V, beta=beta, z0=z0, horizon=horizon, dt=dt)
    out = []
    for i, (label, a, v, reported) in enumerate(rows):
        pred = predict_regime(a, v, beta=beta, z0=z0)
        fp = pred.evidence["fixed_point"]
        out.append({
            "label": label, "reported": reported,
            "predicted": pred.regime, "rule": pred.evidence["rule"], "found": found.regime[i],
            "agree": pred.regime == found.regime[i],
            "predicted_fixed_point": complex(*fp) if fp is not None else None,
            "found_fixed_point": complex(*found.evidence["fixed_point"][i]),
            "predicted_period": pred.evidence["period"], "found_period": found.evidence["period"][i],
            "order_limit": found.evidence["order_limit"][i], "order_std": found.evidence["order_std"][i],
            "arg_drift": found.evidence["arg_drift"][i],
        })
    return out


def regime_trajectories(examples=None, *, n: int = 64, horizon: float = 30.0, dt: float = 0.02,
                        z0=0.3 + 0.1j, beta: float = 1.0, record_every: int = 5) -> dict:
    """Particle and OA trajectories of one ``(A, V)`` per regime in ``d = 2`` (the data of the phase portraits).

    Example::

        >>> from jacobiscope.theory.tokens import regime_trajectories
        >>> data = regime_trajectories(n=16, horizon=4.0, dt=0.05, record_every=2)
        >>> list(data), tuple(data["oscillation"]["theta"].shape)
        (['clustering', 'rotating_clusters', 'oscillation', 'interior_fixed_point'], (41, 16))

    Arguments:
        examples: ``{name: (A, V)}`` (default `REGIME_EXAMPLES`).
        n: tokens; their doubled angles start splay-sampled from the wrapped-Cauchy law centred at ``z0``, so the
            particles' ``R_2`` follows the OA solution from ``z0`` (exactly up to ``(1-|z0|^2)|z0|^{n-1}``).
        horizon, dt, record_every: RK4 integration of both (one batched run each).
        beta: inverse temperature.

    Returns:
        ``{name: {"A", "V", "times" [K], "R2" [K] (particles, complex), "Z" [K] (OA, complex), "theta" [K, n]
        (token angles, ``atan2`` of the states), "states" [K, n, 2]}}``.

    References: theory spec A.2-A.4.
    """
    examples = dict(REGIME_EXAMPLES if examples is None else examples)
    if not examples:
        raise ArgumentError("examples must name at least one (A, V) pair.")
    _check_int(n, "n", 1)
    _check_int(record_every, "record_every", 1)
    steps = max(int(round(horizon / dt)), 1)
    steps += (-steps) % record_every
    A = torch.stack([_matrices(a, v, 2, torch.float64)[0] for a, v in examples.values()])
    V = torch.stack([_matrices(a, v, 2, torch.float64)[1] for a, v in examples.values()])
    theta0 = wrapped_cauchy_phases(z0, n, splay=True)
    x0 = torch.stack([theta0.cos(), theta0.sin()], -1).expand(len(examples), n, 2)
    sim = simulate(A, V, n, 2, steps, dt, "linear", beta, x0=x0, record_every=record_every)
    Z = integrate_oa(kuramoto_order(x0[0]), A, V, steps, dt, beta, record_every=record_every)
    out = {}
    for i, name in enumerate(examples):
        states = sim.states[:, i]
        out[name] = {"A": A[i], "V": V[i], "times": sim.times, "R2": sim.R2[:, i], "Z": Z[:, i],
                     "theta": torch.atan2(states[..., 1], states[..., 0]), "states": states}
    return out


# ---------------------------------------------------------------------------------------------------- helpers
def _crossing_period(signal, level_step, dt, fallback):
    """Mean time between successive upward crossings of ``signal`` through 0 (``level_step=None``) or through
    consecutive multiples of ``level_step`` (a monotone unwrapped phase), linearly interpolated."""
    s = signal.to(torch.float64)
    if level_step is not None:
        s = s / level_step
        k = torch.floor(s)
        idx = torch.nonzero(k[1:] > k[:-1]).flatten()
        levels = k[1:][idx]
    else:
        idx = torch.nonzero((s[:-1] < 0) & (s[1:] >= 0)).flatten()
        levels = torch.zeros_like(idx, dtype=s.dtype)
    if idx.numel() < 2:
        return float(fallback)
    frac = (levels - s[idx]) / (s[idx + 1] - s[idx])
    times = (idx.to(s.dtype) + frac) * dt
    return float((times[-1] - times[0]) / (idx.numel() - 1))


def _unwrap(phase):
    diff = phase[1:] - phase[:-1]
    diff = torch.remainder(diff + math.pi, 2 * math.pi) - math.pi
    return torch.cat([phase[:1], phase[:1] + torch.cumsum(diff, 0)])


def _nest(values, shape):
    if len(shape) == 1:
        return list(values)
    size = len(values) // shape[0]
    return [_nest(values[i * size:(i + 1) * size], shape[1:]) for i in range(shape[0])]


def _normalize_rows(X):
    return X / X.norm(dim=-1, keepdim=True)


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ArgumentError(f"{name} must be an int >= {minimum}, got {value!r}.")


def _matrices(A, V, d, dtype, device=None):
    out = []
    for name, M in (("A", A), ("V", V)):
        if not isinstance(M, torch.Tensor):
            M = torch.as_tensor(M, dtype=dtype, device=device)
        if M.is_complex() or not (M.dtype.is_floating_point):
            raise ArgumentError(f"{name} must be a real floating matrix [..., {d}, {d}], got dtype {M.dtype}.")
        if M.dim() < 2 or M.shape[-2:] != (d, d):
            raise ArgumentError(f"{name} must have shape [..., {d}, {d}] (d = {d}), got {tuple(M.shape)}. "
                                "Pass Q^T K as A and the value matrix as V, both d x d.")
        out.append(M.to(dtype=dtype, device=device if device is not None else M.device))
    if out[0].device != out[1].device:
        raise ArgumentError(f"A and V must be on one device, got {out[0].device} and {out[1].device}.")
    return out[0], out[1]
