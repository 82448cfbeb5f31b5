"""Exact ``d = 2`` reductions of LSA: the Kuramoto–Daido phase form and the Ott–Antonsen equation (spec A.2, A.3)."""
from __future__ import annotations

import math

import torch

from ..errors import ArgumentError, StateError
from ._tokens_checks import _check_int, _matrices, _normalize_rows


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
