"""The QR (Benettin) loop for tiny states: the orbit first, every Jacobian of a stretch in one batched call, then the
QR recursion on small dense matrices.

Example::

    >>> import torch, jacobiscope
    >>> m = jacobiscope.systems.henon_map()
    >>> result = jacobiscope.lyapunov_spectrum(m, steps=2000, k=2, transient=100)
    >>> result.meta["tangent_path"], round(float(result.exponents.sum()), 6)   # ln 0.3: |det J| = b at every loop
    ('dense', -1.203973)

For a map of a few dozen numbers (Hénon, Lorenz-96, the logistic map) a jvp costs what the Python around it costs:
k jvps per loop spend ~0.3 ms on the Hénon map where the arithmetic is a few nanoseconds. Here the orbit runs alone
(one forward per loop, no tangents), the Jacobians ``J_t`` of a chunk of loops come from one forward-mode call
vectorized over the loops and the D basis vectors, and the frame is carried by ``Q_{t+1} R_t = J_t Q_t`` on
``[batch, D, k]`` matrices. The numbers are those of the jvp loop (same products, same QR) to rounding.
"""
from __future__ import annotations

import torch

from ._tangent_step import _orthonormalize  # the jvp loop's QR (diag R > 0): one convention

__all__ = ["dense_pays", "dense_qr_rows", "DENSE_MAX_STATE"]

DENSE_MAX_STATE = 64  # a D x D Jacobian per loop stays cheaper than k jvps up to here (Lorenz-96 N = 40 measured)
CHUNK = 512  # at most this many loops' Jacobians formed at once
# ... and at most this many Jacobian entries (chunk * batch * D^2) per chunk: every intermediate of the batched
# forward-mode call is that big, and past ~2 MiB of float64 it falls out of cache (Lorenz-96, D = 40: 58 us a loop
# in chunks of 128, 114 us in chunks of 512; below ~32 loops a call's vmap overhead, ~3 ms, dominates).
CHUNK_ENTRIES = 1 << 18


def chunk_loops(batch: int, size: int) -> int:
    """Loops per batched Jacobian call for ``batch`` trajectories of ``size`` numbers."""
    return max(32, min(CHUNK, CHUNK_ENTRIES // max(1, batch * size * size)))


def _loops_at_once(looped_map, x, size: int, loops: int) -> int:
    """At most ``loops``: loops whose ``size`` products each (one per basis vector) fit in memory in one call."""
    from ..linalg._product_memory import products_at_once

    return products_at_once(looped_map, x, loops * size) // size


def dense_pays(looped_map, x, frame, size: int, compile) -> bool:
    """Whether the dense loop runs: a tiny state, no compile request, products by forward mode, and the batched
    Jacobian at ``x`` applied to the frame equals the jvps of the frame (a step that ``vmap`` cannot batch, or
    that depends on how it is batched, stays on the jvp loop)."""
    from ..linalg._reverse_products import uses_reverse_products
    from ..linalg._trace import agrees
    from ..linalg.operators import jacobian_matmat

    if size > DENSE_MAX_STATE or compile is not None or uses_reverse_products(looped_map):
        return False
    if _loops_at_once(looped_map, x, size, 1) < 1:  # not even one loop's D products fit in memory at once
        return False
    k, batch = frame.shape[0], int(looped_map.batch_shape(x).numel())
    try:
        with torch.no_grad():
            J = _jacobians(looped_map.step, x.unsqueeze(0), batch, size)[0]  # [batch, D, D]
            dense = (J @ frame.reshape(k, batch, size).permute(1, 2, 0)).permute(2, 0, 1).reshape(frame.shape)
            return agrees([dense], [jacobian_matmat(looped_map, x, frame)], x.dtype)
    except Exception:  # noqa: BLE001 - whatever stops the batched Jacobian, the jvp loop still works
        return False


def _jacobians(step, states: torch.Tensor, batch: int, size: int) -> torch.Tensor:
    """``[n, batch, D, D]``: the Jacobian of each trajectory at each of the ``n`` states ``[n, *batch, *state]``."""
    basis = torch.eye(size, dtype=states.dtype, device=states.device)
    basis = basis.reshape(size, 1, size).expand(size, batch, size).reshape(size, *states.shape[1:])

    def columns(x):  # J e_i for every i and every trajectory at once: [D(i), *batch, *state]
        return torch.func.vmap(lambda v: torch.func.jvp(step, (x,), (v,))[1])(basis)

    products = torch.func.vmap(columns)(states)  # [n, D(i), *batch, *state]
    return products.reshape(states.shape[0], size, batch, size).permute(0, 2, 3, 1)  # [n, batch, D(out), D(i)]


def dense_qr_rows(looped_map, x, frame, total: int, transient: int, reorth_every: int):
    """Run ``total`` loops from ``x`` with the orthonormal ``frame [k, *batch, *state]``.

    Yields ``(t, x_t, frame_t, log|diag R| or None, state finite [batch])`` per loop, as the jvp loop's
    renormalizations would: ``log_r`` where a QR runs (every ``reorth_every`` loops, at ``transient`` and at the
    end), None elsewhere.
    """
    k = frame.shape[0]
    batch = int(looped_map.batch_shape(x).numel())
    size = looped_map.state_size(x)
    Q = frame.reshape(k, batch, size).permute(1, 2, 0)  # [batch, D, k]
    t = 0
    step = _orbit_step(looped_map)
    chunk = max(1, _loops_at_once(looped_map, x, size, chunk_loops(batch, size)))
    while t < total:
        n = min(chunk, total - t)
        states = [x]
        for _ in range(n):
            states.append(step(states[-1]))
        orbit = torch.stack(states)  # [n + 1, *batch, *state]
        J = _jacobians(looped_map.step, orbit[:-1], batch, size)
        finite = (orbit[1:].reshape(n, batch, -1) * 0).sum(-1) == 0  # [n, batch]
        renormalize = [(t + i) % reorth_every == 0 or t + i == total or t + i == transient for i in range(1, n + 1)]
        recursion = _numpy_recursion if Q.device.type == "cpu" else _torch_recursion
        frames, logs = recursion(J, Q, renormalize)
        for i in range(n):
            t += 1
            yield t, orbit[i + 1], frames[i], logs[i] if renormalize[i] else None, finite[i]
        Q, x = frames[-1], orbit[-1]


def _orbit_step(looped_map):
    """The step for the orbit: the module itself when the map's tensors are the module's own (functional_call's
    re-binding of every weight costs ~0.1 ms a call, more than the Hénon map's arithmetic), else ``map.step``."""
    module = looped_map.module
    if module is None or looped_map._power != 1:
        return looped_map.step
    own = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    same = own.keys() == looped_map.params.keys() and all(
        own[name].data_ptr() == tensor.data_ptr() and own[name].dtype == tensor.dtype
        and own[name].shape == tensor.shape for name, tensor in looped_map.params.items())
    return module if same else looped_map.step


def _torch_recursion(J, Q, renormalize):
    """``Q_{i+1} (R_i) = J_i Q_i`` over a chunk: frames ``[n, batch, D, k]`` and ``log|diag R|`` ``[n, batch, k]``."""
    frames, logs = [], []
    for i, flag in enumerate(renormalize):
        Q = J[i] @ Q
        log_r = None
        if flag:
            Q, log_r = _orthonormalize(Q)
        frames.append(Q)
        logs.append(log_r)
    return frames, logs


def _numpy_recursion(J, Q, renormalize):
    """The same recursion in NumPy: on a CPU, a 2 x 2 QR through LAPACK costs ~3x less from NumPy than from torch,
    and the arithmetic here is nothing next to the call overhead."""
    import numpy as np

    Jn, Qn = J.numpy(), Q.numpy()
    frames = np.empty((len(renormalize), *Qn.shape), dtype=Qn.dtype)
    logs = np.zeros((len(renormalize), Qn.shape[0], Qn.shape[-1]), dtype=Qn.dtype)
    single = Qn.shape[-1] == 1
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # NaN/Inf orbits: flagged by the caller
        _recurse(Jn, Qn, renormalize, frames, logs, single)
    return torch.from_numpy(frames), torch.from_numpy(logs)


def _recurse(Jn, Qn, renormalize, frames, logs, single) -> None:
    import numpy as np

    for i, flag in enumerate(renormalize):
        Qn = Jn[i] @ Qn
        if flag:
            if single:
                norms = np.linalg.norm(Qn, axis=1, keepdims=True)
                logs[i] = np.log(norms[:, 0, :])
                # an annihilated tangent (norm exactly 0): log -inf, and the frame goes on along the first axis
                axis = np.zeros_like(Qn)
                axis[:, 0] = 1.0
                Qn = np.where(norms == 0, axis, Qn / np.where(norms == 0, 1.0, norms))
            elif Qn.shape[-1] <= _GRAM_SCHMIDT_MAX_K:
                Qn, logs[i] = _gram_schmidt(Qn)
            else:
                q, r = np.linalg.qr(Qn)
                diagonal = np.diagonal(r, axis1=-2, axis2=-1)
                Qn = q * np.where(diagonal < 0, -1.0, 1.0)[:, None, :]
                logs[i] = np.log(np.abs(diagonal))
        frames[i] = Qn


_GRAM_SCHMIDT_MAX_K = 4  # np.linalg.qr of a stacked 2 x 2 costs ~25 us in call overhead; a few columns by hand, less


def _gram_schmidt(Y):
    """QR of ``Y [batch, D, k]`` for a few columns (diag R > 0): modified Gram-Schmidt, each column
    orthogonalized twice (twice is enough: Kahan, Giraud et al. 2005) so that a strongly stretching step keeps Q
    orthonormal to rounding. Returns (Q, log diag R ``[batch, k]``)."""
    import numpy as np

    Q = Y.copy()
    logs = np.empty((Y.shape[0], Y.shape[-1]), dtype=Y.dtype)
    resolution = 64 * np.finfo(Y.dtype).eps
    for j in range(Y.shape[-1]):
        column = Q[:, :, j]
        before = np.sqrt((column * column).sum(-1))
        for _ in range(2):
            for i in range(j):
                column = column - (Q[:, :, i] * column).sum(-1, keepdims=True) * Q[:, :, i]
        norm = np.sqrt((column * column).sum(-1))
        logs[:, j] = np.log(norm)
        # The Jacobian annihilated this column (a zero or rank-deficient Jacobian: log -inf, or the log of a rounding
        # residue), or it lies in the span of the columns before it to rounding: what is left is noise, whose
        # direction is not orthogonal to anything. Go on with a unit vector orthogonal to those columns, as
        # Householder QR does, not with 0 / 0 = NaN or with a copy of an earlier column.
        lost = norm <= resolution * before
        if lost.any():
            column = np.where(lost[:, None], _orthogonal_axis(Q[:, :, :j]), column)
            norm = np.where(lost, np.sqrt((column * column).sum(-1)), norm)
        Q[:, :, j] = column / norm[:, None]
    return Q, logs


def _orthogonal_axis(Q):
    """Per batch entry, the coordinate axis farthest from the span of the orthonormal columns ``Q [batch, D, j]``,
    with that span projected out (j < D, so one of the first j + 1 axes has a residual of at least 1 / sqrt(j + 1))."""
    import numpy as np

    batch, size, j = Q.shape
    best = np.zeros((batch, size), dtype=Q.dtype)
    best_norm = np.full(batch, -1.0)
    for axis in range(min(j + 1, size)):
        residual = -(Q @ Q[:, axis, :][:, :, None])[:, :, 0]
        residual[:, axis] += 1.0
        norm = np.sqrt((residual * residual).sum(-1))
        better = norm > best_norm
        best = np.where(better[:, None], residual, best)
        best_norm = np.where(better, norm, best_norm)
    return best
