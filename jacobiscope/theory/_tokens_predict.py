"""The regime the spec's exact statements predict for LSA in ``d = 2``, without simulating (spec A.4)."""
from __future__ import annotations

import math

import torch

from ..errors import ArgumentError
from ._tokens_checks import _check_int, _check_real, _check_z0, _matrices
from ._tokens_classify import TokenRegime
from ._tokens_phase import complex_coefficients


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
    beta = _check_real(beta, "beta", nonzero=True)
    _check_int(grid, "grid", 16)  # quadrature points on the circle: a handful cannot resolve psi's zeros
    eye = torch.eye(2, dtype=torch.float64, device=A.device)
    z0 = complex(_check_z0(z0))
    # Rules 1-3 share one signature and return None when their hypothesis on (A, V) fails; first match wins.
    for rule in (_rule_identity_value, _rule_identity_query_symmetric_value, _rule_reversible_value):
        verdict = rule(A, V, eye, beta=beta, z0=z0, tol=tol)
        if verdict is not None:
            return verdict
    return _rule_circle(A, V, beta=beta, grid=grid, tol=tol)


def _verdict(regime, rule, **extra):
    """A `TokenRegime` with the evidence of a prediction: the rule that fired and what it names."""
    evidence = {"rule": None, "fixed_point": None, "period": 0.0, "basin_dependent": False}
    evidence.update(rule=rule, **extra)
    return TokenRegime(regime, evidence, None)


def _close(M, N, tol):
    return float((M - N).abs().max()) <= tol


def _rule_identity_value(A, V, eye, *, beta, z0, tol):
    """Rule 1, ``V = I`` (``None`` when ``V != I``)."""
    if not _close(V, eye, tol):
        return None
    alpha, alpha_p = (complex(c) for c in complex_coefficients(A))
    tr, det = float(A.trace()), float(torch.linalg.det(A))
    zstar = -alpha_p / alpha.conjugate() if abs(alpha) > tol else None
    point = [zstar.real, zstar.imag] if zstar is not None else None
    sym_eigs = torch.linalg.eigvalsh((A + A.T) / 2)
    if tr > tol or det <= tol:
        return _verdict("clustering", "V = I and (tr A > 0 or det A <= 0): every orbit but Z* reaches the circle")
    if float(sym_eigs.max()) < -tol:
        return _verdict("interior_fixed_point", "V = I and sym(A) negative definite: global convergence to Z*",
                        fixed_point=point)
    if tr < -tol:
        return _verdict("interior_fixed_point", "V = I, tr A < 0 < det A, sym(A) indefinite: Z* is an attracting "
                        "focus (an orbit may reach the circle first)", fixed_point=point, basin_dependent=True)
    return _centre_orbit(A, zstar, point, beta=beta, z0=z0)


def _centre_orbit(A, zstar, point, *, beta, z0):
    """Rule 1 with ``tr A = 0 < det A``: the orbits are circles about ``Z*``; the one through ``z0`` decides."""
    r = abs(z0 - zstar)
    if abs(zstar) + r < 1:
        c = abs(float(A[1, 0] - A[0, 1])) / 2
        root = (1 - abs(zstar) ** 2 - r * r) ** 2 - 4 * r * r * abs(zstar) ** 2
        period = 4 * math.pi / (abs(beta) * c * math.sqrt(root))
        return _verdict("oscillation", "V = I, tr A = 0 < det A: the orbit through z0 is a circle about Z* inside "
                        "the disk", fixed_point=point, period=period, basin_dependent=True)
    return _verdict("clustering", "V = I, tr A = 0 < det A: the circle about Z* through z0 leaves the disk",
                    fixed_point=point, basin_dependent=True)


def _rule_identity_query_symmetric_value(A, V, eye, *, beta, z0, tol):
    """Rule 2, ``A = I`` and ``V`` symmetric (``None`` otherwise)."""
    if not (_close(A, eye, tol) and _close(V, V.T, tol)):
        return None
    lam, vec = torch.linalg.eigh(V)
    l1, l2 = float(lam[1]), float(lam[0])
    phi = math.atan2(float(vec[1, 1]), float(vec[0, 1]))
    axis = [math.cos(2 * phi), math.sin(2 * phi)]
    if l1 > tol:
        return _verdict("clustering", "A = I, V symmetric, lambda_1 > 0: clustering onto the top eigen-axis",
                        fixed_point=axis if l1 - l2 > tol else None)
    if l1 >= -tol:
        return _verdict("clustering", "A = I, V symmetric, lambda_1 = 0: algebraic (slow) approach to the circle",
                        fixed_point=axis if l1 - l2 > tol else None)
    zstar = complex(math.cos(2 * phi), math.sin(2 * phi)) * (l1 - l2) / abs(l1 + l2)
    return _verdict("interior_fixed_point", "A = I, V symmetric, lambda_1 < 0: interior fixed point",
                    fixed_point=[zstar.real, zstar.imag])


def _rule_reversible_value(A, V, eye, *, beta, z0, tol):
    """Rule 3, ``A = I`` and ``V = [[a, b], [-b, -a]]`` with ``b != 0`` (``None`` otherwise)."""
    a, b = float(V[0, 0]), float(V[0, 1])
    if not (_close(A, eye, tol) and _close(V, torch.tensor([[a, b], [-b, -a]], dtype=V.dtype, device=V.device), tol)
            and abs(b) > tol):
        return None
    if abs(a) < b:
        return _verdict("oscillation", "A = I, V = [[a, b], [-b, -a]] with |a| < b: Hamiltonian centre family")
    return _verdict("clustering", "A = I, V = [[a, b], [-b, -a]] with |a| >= |b|: no interior centre")


def _rule_circle(A, V, *, beta, grid, tol):
    """Rule 4, the dynamics of one cluster on the invariant circle (``regime = None`` when it decides nothing)."""
    psi = torch.arange(grid, dtype=torch.float64, device=A.device) * (2 * math.pi / grid)
    speed = circle_velocity(psi, A, V, beta)
    lam_perp = transverse_exponent(psi, A, V, beta)
    if bool((speed > tol).all()) or bool((speed < -tol).all()):
        # Periodic integrand: the trapezoidal rule on a uniform grid converges spectrally.
        dt = (2 * math.pi / grid) / speed.abs()
        period = float(dt.sum())
        mean_exp = float((lam_perp * dt).sum()) / period
        if mean_exp < 0:
            return _verdict("rotating_clusters", "circle: psi' never vanishes and the mean transverse exponent is < 0",
                            period=period, mean_transverse_exponent=mean_exp)
        return _verdict(None, "circle: psi' never vanishes but the rotating cluster repels (mean exponent >= 0)",
                        period=period, mean_transverse_exponent=mean_exp)
    slope = (torch.roll(speed, -1) - torch.roll(speed, 1)) / (4 * math.pi / grid)
    crossing = (speed > 0) & (torch.roll(speed, -1) <= 0)
    stable = crossing & (lam_perp < 0) & (slope < 0)
    if bool(stable.any()):
        return _verdict("clustering", "circle: psi' has a zero that is stable along the circle with lambda_perp < 0",
                        fixed_point=None, basin_dependent=True)
    return _verdict(None, "not covered by the spec's exact statements")
