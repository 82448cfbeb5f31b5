"""The largest singular value of a looped map's Jacobian, matrix-free (Lanczos or power iteration on J^T J)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from ..errors import ArgumentError, ConvergenceWarning, NonFiniteWarning
from ..maps import as_looped_map, require_precision
from .._validation import one_of, positive_int, seed_int, tolerance, within_budget
from .operators import JacobianOperator, check_map_at

__all__ = ["spectral_norm", "SpectralNormResult"]


@dataclass
class SpectralNormResult:
    """What `spectral_norm` returns.

    Attributes:
        value: ``sigma_max(J)``, a tensor of shape ``batch`` (0-d for an unbatched map).
        iterations: Lanczos / power iterations used (each costs one jvp and one vjp).
        tolerance: the achieved relative residual ``||J^T J v - s^2 v|| / s^2`` of the returned vector, per
            trajectory. For Lanczos the true ``sigma_max^2`` lies within ``tolerance * s^2`` of ``s^2``.
        converged: whether every trajectory reached the requested ``tol``.
        right_vector: the top right singular vector ``v`` (unit norm per trajectory), shaped like the state.
        left_vector: ``u = J v / sigma``, shaped like the state.
        history: the estimate after each iteration, ``[iterations, *batch]``.
        method: ``"lanczos"`` or ``"power"``.
    """

    value: torch.Tensor
    iterations: int
    tolerance: torch.Tensor
    converged: bool
    right_vector: torch.Tensor
    left_vector: torch.Tensor
    history: torch.Tensor
    method: str
    meta: dict = field(default_factory=dict)

    def __float__(self) -> float:
        return float(self.value.max())


def spectral_norm(
    step,
    x: torch.Tensor | None = None,
    *,
    method: str = "lanczos",
    tol: float | None = None,
    max_iter: int = 200,
    seed: int = 0,
    v0: torch.Tensor | None = None,
    batch_dims: int | None = None,
) -> SpectralNormResult:
    """The spectral norm ``||dF/dX||_2`` of one loop at ``x``, without forming the Jacobian.

    Example::

        >>> import torch, jacobiscope
        >>> A = torch.tensor([[3.0, 0.0], [4.0, 5.0]], dtype=torch.float64)
        >>> result = jacobiscope.spectral_norm(lambda x: A @ x, torch.zeros(2, dtype=torch.float64))
        >>> round(float(result.value), 6) == round(float(torch.linalg.matrix_norm(A, 2)), 6)
        True

    Arguments:
        step: a `LoopedMap` or a callable; a batched map gives one value per trajectory.
        x: the state (default: the map's ``x0``).
        method: ``"lanczos"`` (default; Lanczos on ``J^T J`` with full reorthogonalization, which converges
            far faster than the power method when the top singular values are close) or ``"power"``.
        tol: relative residual to reach (default ``1e-10`` in float64, ``1e-5`` in float32).
        max_iter: iteration cap; a `ConvergenceWarning` is issued when it is reached first.
        seed: seed of the random start vector (ignored when ``v0`` is given).
        v0: optional start vector shaped like the state (e.g. the previous ``right_vector``, to warm-start).

    Returns:
        `SpectralNormResult` (value, iterations, achieved tolerance, vectors, history).

    Each iteration costs one jvp and one vjp (the vjp's linearization is built once).
    """
    one_of(method, "method", ("lanczos", "power"))
    max_iter = within_budget(max_iter, "max_iter", "iterations", unit="iterations")  # tol=0 never stops early
    tol = tolerance(tol, "tol")  # a negative or NaN tol never stops (NaN) or always warns (negative)
    seed = seed_int(seed)
    looped_map = as_looped_map(step, batch_dims=batch_dims).detached()
    x = looped_map.prepare_state(x)
    require_precision(x, "spectral_norm")
    if v0 is not None:
        v0 = _check_v0(v0, x, looped_map)
    if tol is None:
        tol = 1e-10 if x.dtype == torch.float64 else 1e-5
    # Under no_grad, weights a plain-callable map closes over record no graph per product (detached() only
    # reaches an nn.Module's parameters); the products are w.r.t. the state and need none.
    with torch.no_grad():
        check_map_at(looped_map, x, "spectral_norm", reverse=True)
        return _spectral_norm(looped_map, x, method, tol, max_iter, seed, v0)


def _check_v0(v0, x, looped_map) -> torch.Tensor:
    """A start vector shaped like the state, finite and non-zero for every trajectory."""
    if not isinstance(v0, torch.Tensor):
        raise ArgumentError(f"v0 must be a torch.Tensor shaped like the state {tuple(x.shape)}, got "
                            f"{type(v0).__name__} — pass e.g. v0=result.right_vector, or None for a random start.")
    if v0.shape != x.shape:
        raise ArgumentError(f"v0 must have the state's shape {tuple(x.shape)}, got {tuple(v0.shape)} — pass e.g. "
                            "v0=result.right_vector of a run at this state, or None for a random start.")
    if v0.is_complex() or v0.dtype == torch.bool:
        raise ArgumentError(f"v0 must be a real tensor, got {v0.dtype} — pass a float tensor, or None.")
    batch = int(looped_map.batch_shape(x).numel())
    flat = v0.detach().to(device=x.device, dtype=x.dtype).reshape(batch, -1)
    if not bool(torch.isfinite(flat).all()) or not bool((flat.norm(dim=1) > 0).all()):
        raise ArgumentError("v0 must be finite and non-zero for every trajectory (a zero start vector gives "
                            "sigma = 0) — pass a non-zero vector, or v0=None for a random start.")
    return v0


def _spectral_norm(looped_map, x, method, tol, max_iter, seed, v0, operator=None) -> SpectralNormResult:
    """``operator``: the `JacobianOperator` of ``looped_map`` at ``x`` when the caller has one (its recordings and
    its vjp's linearization are then reused)."""
    operator = JacobianOperator(looped_map, x) if operator is None else operator
    batch_shape = looped_map.batch_shape(x)
    batch = int(torch.Size(batch_shape).numel())
    size = looped_map.state_size(x)

    nonfinite = torch.zeros(batch, dtype=torch.bool, device=x.device)

    def normal_operator(v_flat: torch.Tensor) -> torch.Tensor:
        """``J^T J v`` for a ``[batch, D]`` block of per-trajectory vectors."""
        jv = operator.matvec(v_flat.reshape(x.shape))
        product = operator.rmatvec(jv).reshape(batch, size)
        # An overflowing Jacobian (finite state, infinite slope) must not reach LAPACK: zero it and flag it.
        bad = ~torch.isfinite(product).all(1)
        if bool(bad.any()):
            nonfinite.logical_or_(bad)
            product = torch.where(bad.unsqueeze(1), torch.zeros_like(product), product)
        return product

    if v0 is None:
        generator = torch.Generator(device=x.device).manual_seed(seed)
        v = torch.randn(batch, size, generator=generator, device=x.device, dtype=x.dtype)
    else:
        v = v0.to(x.dtype).reshape(batch, size).clone()
    v = v / v.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)

    run = _lanczos if method == "lanczos" else _power
    sigma_sq, vector, iterations, residual, history = run(normal_operator, v, tol, min(max_iter, size if method == "lanczos" else max_iter))
    sigma = sigma_sq.detach().clamp_min(0).sqrt()
    vector, residual, history = vector.detach(), residual.detach(), history.detach()
    if bool(nonfinite.any()):
        nan = torch.full_like(sigma, float("nan"))
        sigma, residual = torch.where(nonfinite, nan, sigma), torch.where(nonfinite, nan, residual)
        warnings.warn(
            f"spectral_norm: the Jacobian of '{looped_map.name}' is NaN/Inf at this state for "
            f"{int(nonfinite.sum())} of {batch} trajectories (the map overflows nearby); their value is NaN.",
            NonFiniteWarning,
            stacklevel=3,
        )
        residual = torch.where(nonfinite, torch.zeros_like(residual), residual)
    converged = bool((residual <= tol).all())
    if bool(nonfinite.any()):
        residual = torch.where(nonfinite, torch.full_like(residual, float("nan")), residual)
    if not converged:
        warnings.warn(
            f"spectral_norm ({method}) stopped after {iterations} iterations with relative residual "
            f"{float(residual.max()):.2e} > tol={tol:.1e}. Raise max_iter, or pass v0=result.right_vector to continue.",
            ConvergenceWarning,
            stacklevel=3,
        )
    right = vector.reshape(x.shape)
    left = operator.matvec(right).detach()
    left = left.reshape(batch, size) / sigma.reshape(batch, 1).clamp_min(torch.finfo(x.dtype).tiny)
    return SpectralNormResult(
        value=sigma.reshape(batch_shape),
        iterations=iterations,
        tolerance=residual.reshape(batch_shape),
        converged=converged,
        right_vector=right,
        left_vector=left.reshape(x.shape),
        history=history.sqrt().reshape(-1, *batch_shape),
        method=method,
        meta={"map": looped_map.name, "dtype": str(x.dtype), "device": str(x.device), "tol": tol},
    )


def _lanczos(apply, v, tol, max_iter):
    """Batched Lanczos with full reorthogonalization on the symmetric PSD operator ``apply``.

    Returns (top Ritz value, its Ritz vector, iterations, relative residual, history of top Ritz values).
    """
    batch, size = v.shape
    basis = [v]
    alphas, betas = [], []
    history = []
    tiny = torch.finfo(v.dtype).eps
    for j in range(max_iter):
        w = apply(basis[-1])
        alpha = (w * basis[-1]).sum(1)
        V = torch.stack(basis, dim=1)  # [batch, j+1, D]
        # Classical Gram-Schmidt twice: keeps the basis orthogonal to working precision.
        for _ in range(2):
            w = w - torch.einsum("bjd,bj->bd", V, torch.einsum("bjd,bd->bj", V, w))
        beta = w.norm(dim=1)
        alphas.append(alpha)
        betas.append(beta)
        values, vectors = torch.linalg.eigh(_tridiagonal(alphas, betas[:-1]))
        top_value, top_coefficients = values[:, -1], vectors[:, :, -1]
        history.append(top_value)
        scale = top_value.abs().clamp_min(tiny)
        # An exhausted Krylov space (beta ~ 0) is an exact invariant subspace: its Ritz values are exact.
        exhausted = beta <= 10 * tiny * scale
        residual = torch.where(exhausted, torch.zeros_like(beta), beta * top_coefficients[:, -1].abs() / scale)
        if bool((residual <= tol).all()) or j == max_iter - 1:
            top_vector = torch.einsum("bjd,bj->bd", V, top_coefficients)
            return top_value, top_vector, j + 1, residual, torch.stack(history)
        next_vector = w / beta.clamp_min(tiny).unsqueeze(1)
        if bool(exhausted.any()):
            # Continue an exhausted trajectory in the orthogonal complement (T stays block diagonal).
            next_vector = torch.where(exhausted.unsqueeze(1), _orthogonal_random(V, w), next_vector)
            betas[-1] = torch.where(exhausted, torch.zeros_like(beta), beta)
        basis.append(next_vector)
    raise AssertionError("unreachable")


def _orthogonal_random(V, like):
    from .._probes import probe_like

    w = probe_like(like, seed=V.shape[1])  # another draw for each basis size, none from the caller's stream
    for _ in range(2):
        w = w - torch.einsum("bjd,bj->bd", V, torch.einsum("bjd,bd->bj", V, w))
    return w / w.norm(dim=1, keepdim=True)


def _tridiagonal(alphas, off):
    batch = alphas[0].shape[0]
    n = len(alphas)
    T = torch.zeros(batch, n, n, dtype=alphas[0].dtype, device=alphas[0].device)
    index = torch.arange(n)
    T[:, index, index] = torch.stack(alphas, 1)
    if off:
        off_diag = torch.stack(off, 1)
        T[:, index[:-1], index[1:]] = off_diag
        T[:, index[1:], index[:-1]] = off_diag
    return T


def _power(apply, v, tol, max_iter):
    """Power iteration on ``J^T J``: the textbook method, kept as an independent cross-check."""
    history = []
    tiny = torch.finfo(v.dtype).tiny
    for j in range(max_iter):
        w = apply(v)
        value = (w * v).sum(1)
        residual = (w - value.unsqueeze(1) * v).norm(dim=1) / value.abs().clamp_min(tiny)
        history.append(value)
        if bool((residual <= tol).all()) or j == max_iter - 1:
            return value, v, j + 1, residual, torch.stack(history)
        v = w / w.norm(dim=1, keepdim=True).clamp_min(tiny)
