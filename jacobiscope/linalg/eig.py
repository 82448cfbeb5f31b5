"""Eigenvalues of a looped map's Jacobian: all of them densely, or the top-k by modulus matrix-free (Arnoldi)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from ..errors import ArgumentError, ConvergenceWarning, NonFiniteWarning
from ..maps import as_looped_map, require_precision
from .._validation import one_of, nonnegative_int, seed_int, tolerance, within_budget
from .dense import DEFAULT_MAX_BYTES, _dense, check_dense_budget, check_max_bytes
from .operators import JacobianOperator, check_map_at

__all__ = ["jacobian_eigenvalues", "EigenResult", "DENSE_LIMIT"]

#: States up to this size use the dense path when ``method="auto"``.
DENSE_LIMIT = 1024


@dataclass
class EigenResult:
    """What `jacobian_eigenvalues` returns.

    Attributes:
        values: complex eigenvalues ``[*batch, k]``, sorted by modulus, largest first (for a conjugate pair,
            the one with positive imaginary part first).
        residuals: relative residuals ``||J y - lambda y|| / (|lambda| ||y||)`` of the Ritz pairs, measured
            with fresh jvps after the iteration (Arnoldi), or ``None`` for the dense path.
        converged: whether every requested eigenvalue met ``tol``.
        method: ``"dense"`` or ``"arnoldi"``.
        iterations: Arnoldi restarts (0 for dense).
        matvecs: jvps spent (0 for dense).
    """

    values: torch.Tensor
    residuals: torch.Tensor | None
    converged: bool
    method: str
    iterations: int = 0
    matvecs: int = 0
    meta: dict = field(default_factory=dict)

    def oscillation(self, **kwargs):
        """`jacobiscope.oscillation_measures` of these eigenvalues."""
        from ._oscillation import oscillation_measures

        return oscillation_measures(self.values, **kwargs)


def jacobian_eigenvalues(
    step,
    x: torch.Tensor | None = None,
    k: int | None = None,
    *,
    method: str = "auto",
    tol: float | None = None,
    krylov_dim: int | None = None,
    max_restarts: int = 200,
    seed: int = 0,
    dense_limit: int = DENSE_LIMIT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    batch_dims: int | None = None,
) -> EigenResult:
    """Eigenvalues of the Jacobian ``dF/dX`` of one loop at ``x``.

    Example::

        >>> import torch, jacobiscope
        >>> A = torch.diag(torch.tensor([0.5, -2.0, 1.0], dtype=torch.float64))
        >>> jacobiscope.jacobian_eigenvalues(lambda x: A @ x, torch.zeros(3, dtype=torch.float64), k=2).values
        tensor([-2.+0.j,  1.+0.j], dtype=torch.complex128)

    Arguments:
        step, x: the map (a `LoopedMap` or callable) and the state (default: the map's ``x0``).
        k: how many eigenvalues, largest modulus first. ``None``: all of them (dense).
        method: ``"auto"`` (dense when ``k`` is None or the state has at most ``dense_limit`` entries,
            Arnoldi otherwise), ``"dense"`` (``torch.linalg.eigvals`` of the dense Jacobian), or ``"arnoldi"``
            (restarted Arnoldi on jvps: the Jacobian is never formed; runs on any device).
        tol: relative residual for Arnoldi (default ``1e-10`` in float64, ``1e-5`` in float32).
        krylov_dim: Arnoldi basis size ``m`` (default ``max(2k + 1, k + 20)``, capped at the state size).
        max_restarts: restart cap; a `ConvergenceWarning` says when it was hit.
        max_bytes: memory budget of the dense path (`MemoryBudgetError` beyond it).

    Returns:
        `EigenResult`. A batched map gives one row of eigenvalues per trajectory.

    References: Stewart, "A Krylov–Schur algorithm for large eigenproblems", SIAM J. Matrix Anal. Appl. 23 (2001):
    the restart keeps an orthonormal basis of the wanted Ritz vectors' invariant subspace, as done here.
    """
    tol = tolerance(tol, "tol")  # NaN never converges, a negative tol always warns
    max_restarts = nonnegative_int(max_restarts, "max_restarts")  # -1 ended in "AssertionError: unreachable"
    if max_restarts:
        within_budget(max_restarts, "max_restarts", "iterations", unit="restarts")  # tol=0 never converges
    dense_limit = nonnegative_int(dense_limit, "dense_limit")
    if k is not None and not isinstance(k, bool):
        from .._validation import _is_int

        # checked for its kind and range by _resolve_method (its wording names k=None); here only the budget
        k = within_budget(k, "k", "eigen_k", unit="eigenvalues") if _is_int(k) and k >= 1 else k
    seed = seed_int(seed)
    check_max_bytes(max_bytes)
    if krylov_dim is not None:
        from .._validation import _is_int

        if not _is_int(krylov_dim) or krylov_dim < 1:
            raise ArgumentError(f"krylov_dim must be None or a positive int (> k), got {krylov_dim!r} — pass "
                                "krylov_dim=None for the default max(2k + 1, k + 20).")
        krylov_dim = int(krylov_dim)  # capped at the state size below
    looped_map = as_looped_map(step, batch_dims=batch_dims).detached()
    x = looped_map.prepare_state(x)
    require_precision(x, "jacobian_eigenvalues")
    size = looped_map.state_size(x)
    method = _resolve_method(method, k, size, dense_limit)
    meta = {"map": looped_map.name, "dtype": str(x.dtype), "device": str(x.device), "state_size": size}
    # Under no_grad: weights a plain-callable map closes over would otherwise record a graph in every jvp, and the
    # Krylov basis (written in place) would chain them all (3.1 GB instead of 0.59 GB on a Sudoku puzzle).
    if method == "dense":  # refuse an oversized dense Jacobian before running the model at all
        check_dense_budget(int(looped_map.batch_shape(x).numel()), size, x.dtype, max_bytes,
                           "jacobian_eigenvalues(method='dense')")
    with torch.no_grad():
        check_map_at(looped_map, x, "jacobian_eigenvalues", reverse=method == "dense")
        if method == "dense":
            return _dense_eigenvalues(looped_map, x, k, size, max_bytes, meta)
        return _arnoldi_eigenvalues(looped_map, x, k, size, tol, krylov_dim, max_restarts, seed, meta)


def _resolve_method(method: str, k: int | None, size: int, dense_limit: int) -> str:
    """Check ``k`` and ``method`` against the state size; ``"auto"`` becomes ``"dense"`` or ``"arnoldi"``."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
        raise ArgumentError(f"k must be a positive int or None (all eigenvalues), got {k!r} — pass k=None, or an int "
                            f"in 1..{size}.")
    if k is not None and k > size:
        raise ArgumentError(f"k={k} is larger than the state size D={size}; the Jacobian has only {size} eigenvalues "
                            f"— pass k<={size} (or k=None for all).")
    one_of(method, "method", ("auto", "dense", "arnoldi"))
    if method == "auto":
        method = "dense" if (k is None or size <= dense_limit) else "arnoldi"
    if method == "arnoldi" and k is None:
        raise ArgumentError("method='arnoldi' finds the top-k eigenvalues: pass k=... (or method='dense' for all).")
    return method


def _dense_eigenvalues(looped_map, x, k, size, max_bytes, meta) -> EigenResult:
    """All eigenvalues (the first ``k`` if given) from the dense Jacobian; NaN for trajectories where it is NaN/Inf."""
    batch = int(torch.Size(looped_map.batch_shape(x)).numel())
    check_dense_budget(batch, size, x.dtype, max_bytes, "jacobian_eigenvalues(method='dense')")
    J = _dense(looped_map, x, "rev", 256, looped_map.batch_shape(x), batch, size)  # the map was checked already
    bad = ~torch.isfinite(J).flatten(-2).all(-1)
    if bool(bad.any()):
        _warn_nonfinite(looped_map, int(bad.sum()), bad.numel(), stacklevel=4)
        J = torch.where(bad[..., None, None], torch.zeros_like(J), J)
    values = _sort_by_modulus(torch.linalg.eigvals(J))
    if bool(bad.any()):
        values = torch.where(bad[..., None], torch.full_like(values, complex("nan+nanj")), values)
    if k is not None:
        values = values[..., :k]
    return EigenResult(values=values, residuals=None, converged=True, method="dense", meta=meta)


def _arnoldi_eigenvalues(looped_map, x, k, size, tol, krylov_dim, max_restarts, seed, meta) -> EigenResult:
    """The ``k`` eigenvalues of largest modulus of each trajectory's Jacobian, by restarted Arnoldi on jvps."""
    if tol is None:
        tol = 1e-10 if x.dtype == torch.float64 else 1e-5
    m = krylov_dim or max(2 * k + 1, k + 20)
    m = min(m, size)
    if m <= k and m < size:
        raise ArgumentError(f"krylov_dim={m} must exceed k={k} — pass krylov_dim={max(2 * k + 1, k + 20)} (or None "
                            "for that default).")
    batch_shape = looped_map.batch_shape(x)
    batch = int(torch.Size(batch_shape).numel())
    generator = torch.Generator(device=x.device).manual_seed(seed)
    rows, residual_rows = [], []
    restarts = matvecs = 0
    all_converged = True
    operator = JacobianOperator(looped_map, x)  # products from a graph split at x once that pays
    for b in range(batch):
        # Each trajectory is its own eigenproblem. Its products run on the whole batch with zero tangents
        # elsewhere, because a map built by capture and replay (masks, rotary tables) only accepts its own batch.
        block_product = _trajectory_products(operator, x, b, batch, size)

        def matvec(v, block_product=block_product):
            return block_product(v.unsqueeze(0))[0]

        try:
            values, vectors, used_restarts, used_matvecs, converged = _krylov_schur(
                matvec, size, k, m, tol, max_restarts, x.dtype, x.device, generator
            )
            residuals = _true_residuals(block_product, values, vectors)
        except _NonFiniteProduct:
            _warn_nonfinite(looped_map, 1, batch, stacklevel=4)
            complex_dtype = torch.complex128 if x.dtype == torch.float64 else torch.complex64
            values = torch.full((k,), complex("nan+nanj"), dtype=complex_dtype, device=x.device)
            residuals = torch.full((k,), float("nan"), dtype=x.dtype, device=x.device)
            used_restarts, used_matvecs, converged = 0, 0, False
        rows.append(values.detach())
        residual_rows.append(residuals.detach())
        restarts = max(restarts, used_restarts)
        matvecs += used_matvecs + 2 * k
        all_converged &= converged
    if not all_converged:
        warnings.warn(
            f"Arnoldi reached max_restarts={max_restarts} before all {k} eigenvalues met tol={tol:.1e}; "
            "see result.residuals. Raise max_restarts or krylov_dim.",
            ConvergenceWarning,
            stacklevel=3,
        )
    return EigenResult(
        values=torch.stack(rows).reshape(*batch_shape, k),
        residuals=torch.stack(residual_rows).reshape(*batch_shape, k),
        converged=all_converged,
        method="arnoldi",
        iterations=restarts,
        matvecs=matvecs,
        meta={**meta, "krylov_dim": m, "tol": tol},
    )


class _NonFiniteProduct(Exception):
    """A jvp came back NaN/Inf: the Jacobian overflows at this state."""


def _warn_nonfinite(looped_map, bad: int, total: int, *, stacklevel: int) -> None:
    # stacklevel: the warning points at the code that called jacobian_eigenvalues, however deep the helper is.
    warnings.warn(
        f"jacobian_eigenvalues: the Jacobian of '{looped_map.name}' is NaN/Inf at this state for {bad} of {total} "
        "trajectories (the map overflows nearby); their eigenvalues are NaN.",
        NonFiniteWarning,
        stacklevel=stacklevel,
    )


def _modulus_order(values: torch.Tensor) -> torch.Tensor:
    """Indices sorting by modulus, largest first; within equal moduli (conjugate pairs) positive Im first."""
    by_imag = torch.argsort(values.imag, dim=-1, descending=True, stable=True)
    by_modulus = torch.argsort(torch.gather(values.abs(), -1, by_imag), dim=-1, descending=True, stable=True)
    return torch.gather(by_imag, -1, by_modulus)


def _sort_by_modulus(values: torch.Tensor) -> torch.Tensor:
    return torch.gather(values, -1, _modulus_order(values))


def _krylov_schur(matvec, size, k, m, tol, max_restarts, dtype, device, generator):
    """Restarted Arnoldi for the ``k`` eigenvalues of largest modulus of the operator ``matvec``.

    Returns (values [k] complex, Ritz vectors [k, D] complex, restarts, matvecs, converged).
    """
    V = torch.zeros(m + 1, size, dtype=dtype, device=device)
    H = torch.zeros(m + 1, m, dtype=dtype, device=device)
    start = torch.randn(size, generator=generator, dtype=dtype, device=device)
    V[0] = start / start.norm()
    kept = 0
    matvecs = 0
    eps = torch.finfo(dtype).eps
    for restart in range(max_restarts + 1):
        for j in range(kept, m):
            w = matvec(V[j])
            matvecs += 1
            if not bool(torch.isfinite(w).all()):
                raise _NonFiniteProduct
            basis = V[: j + 1]
            coefficients = basis @ w
            w = w - basis.T @ coefficients
            correction = basis @ w  # second Gram-Schmidt pass
            w = w - basis.T @ correction
            H[: j + 1, j] = coefficients + correction
            beta = w.norm()
            scale = H[: j + 2, : j + 1].norm().clamp_min(eps)
            if beta <= 10 * eps * scale:
                # Invariant subspace: the Ritz values so far are exact. Continue in the orthogonal complement.
                H[j + 1, j] = 0.0
                if j + 1 < size:
                    w = torch.randn(size, generator=generator, dtype=dtype, device=device)
                    for _ in range(2):
                        w = w - V[: j + 1].T @ (V[: j + 1] @ w)
                    V[j + 1] = w / w.norm()
                else:
                    V[j + 1] = 0.0
            else:
                H[j + 1, j] = beta
                V[j + 1] = w / beta
        theta, Y = torch.linalg.eig(H[:m, :m])
        order = _modulus_order(theta)
        theta, Y = theta[order], Y[:, order]
        Y = Y / torch.linalg.vector_norm(Y, dim=0, keepdim=True)
        residual_row = H[m, :m].to(Y.dtype)
        estimates = (residual_row @ Y).abs() / theta.abs().clamp_min(eps)
        converged = bool((estimates[:k] <= tol).all()) or m == size
        if converged or restart == max_restarts:
            vectors = (V[:m].T.to(Y.dtype) @ Y[:, :k]).T
            return theta[:k], vectors, restart, matvecs, converged
        # Keep more than k vectors: the extra ones speed convergence of the wanted ones.
        # (A conjugate pair cut in two is completed by _real_basis, hence the room of two.)
        keep = max(min(k + (m - k) // 2, m - 2), 1)
        W = _real_basis(theta[:keep], Y[:, :keep])
        keep = W.shape[1]
        new_row = H[m, :m] @ W
        H_new = torch.zeros_like(H)
        H_new[:keep, :keep] = W.T @ H[:m, :m] @ W
        H_new[keep, :keep] = new_row
        V_new = torch.zeros_like(V)
        V_new[:keep] = W.T @ V[:m]
        V_new[keep] = V[m]
        H, V, kept = H_new, V_new, keep
    raise AssertionError("unreachable")


def _real_basis(theta: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """An orthonormal real basis of the span of the Ritz vectors ``Y`` and of their complex conjugates.

    A conjugate pair contributes ``Re y`` and ``Im y`` once (from its member with positive imaginary part),
    a real eigenvalue its (real) eigenvector, so the columns are independent and the span is invariant.
    """
    columns = []
    scale = theta.abs().clamp_min(torch.finfo(theta.real.dtype).tiny)
    is_complex = theta.imag.abs() > 1e-12 * scale
    for index in range(theta.shape[0]):
        y = Y[:, index]
        if not bool(is_complex[index]):
            # Real eigenvalue: its eigenvector is real up to a complex phase; keep the larger part.
            columns.append(y.real if y.real.norm() >= y.imag.norm() else y.imag)
            continue
        if theta[index].imag < 0:
            partner = (theta[:index] - theta[index].conj()).abs() <= 1e-8 * scale[index]
            if bool(partner.any()):
                continue  # its conjugate already contributed Re and Im
        columns.extend([y.real, y.imag])
    Q, _ = torch.linalg.qr(torch.stack(columns, dim=1))
    return Q


def _trajectory_products(operator, x, index, batch, size):
    """``V -> J_index V`` for a block ``V [n, D]`` of tangents of trajectory ``index`` (others held at zero)."""

    def products(V):
        tangents = torch.zeros(V.shape[0], batch, size, dtype=x.dtype, device=x.device)
        tangents[:, index] = V
        out = operator.matmat(tangents.reshape(V.shape[0], *x.shape))
        return out.reshape(V.shape[0], batch, size)[:, index]

    return products


def _true_residuals(block_product, values, vectors):
    """``||J y - lambda y|| / (|lambda| ||y||)`` for complex Ritz pairs, with two real jvps per pair."""
    products = block_product(torch.cat([vectors.real, vectors.imag])).reshape(2, vectors.shape[0], -1)
    Jy = torch.complex(products[0], products[1])
    diff = Jy - values.unsqueeze(1) * vectors
    return diff.norm(dim=1) / (values.abs() * vectors.norm(dim=1)).clamp_min(torch.finfo(products.dtype).tiny)
