"""Particles on the sphere: the attention field, RK4 / projected-Euler integration and `simulate` (spec A.1, A.5)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..dynamics.clusters import TokenOrderParameters, leading_axis_rotation, token_order_parameters
from ..errors import ArgumentError, StateError
from ._tokens_checks import _ATTENTIONS, _check_int, _check_real, _matrices, _normalize_rows
from ._tokens_phase import kuramoto_order


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
    beta = _check_real(beta, "beta")
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
        if not bool(torch.isfinite(x0).all()) or bool((x0.norm(dim=-1) == 0).any()):
            raise StateError("x0 holds a NaN/Inf entry or a zero token — tokens live on the sphere S^(d-1): pass "
                             "finite, non-zero tokens (they are normalized)")
    states = integrate_tokens(x0, A, V, steps, dt, attention=attention, beta=beta, method=method,
                              record_every=record_every)
    times = torch.arange(states.shape[0], dtype=dtype, device=A.device) * (dt * record_every)
    order = token_order_parameters(states)
    R2 = kuramoto_order(states) if d == 2 else None
    speed = leading_axis_rotation(states, signed=(attention == "softmax"), dt=dt * record_every)
    return TokenSimulation(times, states, order, R2, speed, attention, float(beta), float(dt))
