"""The dense Jacobian, for small states and for testing the matrix-free paths."""
from __future__ import annotations

import math

import torch
from torch.func import vmap

from ..errors import ArgumentError, MemoryBudgetError
from ..maps import as_looped_map
from .._validation import one_of, positive_int
from .operators import JacobianOperator, check_map_at, jacobian_matmat

__all__ = ["jacobian", "DEFAULT_MAX_BYTES", "dense_bytes", "check_dense_budget"]

#: Default memory budget of a dense Jacobian (1 GiB). Raise it per call with ``max_bytes=``.
DEFAULT_MAX_BYTES = 1 << 30


def dense_bytes(batch: int, state_size: int, dtype: torch.dtype) -> int:
    """Bytes of ``batch`` dense ``D x D`` Jacobians in ``dtype``."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return batch * state_size * state_size * itemsize


def check_max_bytes(max_bytes) -> None:
    """``max_bytes`` must be a number of bytes >= 0 (a string such as "1GB" would fail inside a comparison)."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, float)) or math.isnan(max_bytes) or max_bytes < 0:
        raise ArgumentError(f"max_bytes must be a number of bytes >= 0, got {max_bytes!r} — pass e.g. "
                            f"max_bytes={DEFAULT_MAX_BYTES} (1 GiB, the default).")


def check_dense_budget(batch: int, state_size: int, dtype: torch.dtype, max_bytes: int, what: str) -> None:
    """Raise `MemoryBudgetError` when ``batch`` dense Jacobians exceed ``max_bytes``."""
    check_max_bytes(max_bytes)
    required = dense_bytes(batch, state_size, dtype)
    if required > max_bytes:
        raise MemoryBudgetError(
            f"{what} needs the dense Jacobian: {batch} x {state_size} x {state_size} {str(dtype).replace('torch.', '')} "
            f"= {_human(required)}, over the budget of {_human(max_bytes)}. Raise max_bytes= (e.g. max_bytes={required}) "
            "if the memory is there, or use the matrix-free calls (spectral_norm, jacobian_eigenvalues(k=...), "
            "lyapunov_spectrum).",
            required_bytes=required,
            budget_bytes=max_bytes,
        )


def jacobian(
    step,
    x: torch.Tensor | None = None,
    *,
    method: str = "rev",
    chunk_size: int = 256,
    max_bytes: int = DEFAULT_MAX_BYTES,
    batch_dims: int | None = None,
) -> torch.Tensor:
    """The dense Jacobian ``dF/dX`` of one loop at ``x``, as a ``[*batch, D, D]`` matrix (``D`` = state size).

    Example::

        >>> import torch, jacobiscope
        >>> jacobiscope.jacobian(lambda x: torch.stack([x[0] * x[1], x[1]]), torch.tensor([2.0, 3.0]))
        tensor([[3., 2.],
                [0., 1.]])

    Arguments:
        step: a `LoopedMap` or a callable. For a batched map, only the diagonal blocks (one per trajectory)
            are formed, since trajectories are independent.
        x: the state ``[*batch, *state]`` (default: the map's ``x0``).
        method: ``"rev"`` (rows by vjps; the fastest on CPU) or ``"fwd"`` (columns by jvps).
        chunk_size: at most this many basis vectors per vmapped chunk (256 was the fastest measured); fewer where
            their products would not fit in half the free memory at once (`jacobiscope.linalg._product_memory`).
        max_bytes: refuse (`MemoryBudgetError`, with the size it would need) when the result exceeds this.

    Row ``i`` / column ``j`` index the state flattened in C order per trajectory.
    """
    one_of(method, "method", ("rev", "fwd"))
    positive_int(chunk_size, "chunk_size")  # 0 would never advance; a negative one left torch.empty garbage
    check_max_bytes(max_bytes)
    looped_map = as_looped_map(step, batch_dims=batch_dims).detached()
    x = looped_map.prepare_state(x)
    batch_shape = looped_map.batch_shape(x)
    batch = int(torch.Size(batch_shape).numel())
    size = looped_map.state_size(x)
    check_dense_budget(batch, size, x.dtype, max_bytes, "jacobian()")
    # No graph for weights the map closes over: D products would each keep one (detached() covers nn.Module maps).
    with torch.no_grad():
        check_map_at(looped_map, x, "jacobian()", reverse=method == "rev")
        return _dense(looped_map, x, method, chunk_size, batch_shape, batch, size)


def _dense(looped_map, x, method, chunk_size, batch_shape, batch, size):
    from ._product_memory import products_at_once

    operator = JacobianOperator(looped_map, x)
    # at most chunk_size basis vectors a call, fewer where their products would not fit in memory at once
    chunk_size = products_at_once(looped_map, x, min(chunk_size, size))
    result = torch.empty(batch, size, size, dtype=x.dtype, device=x.device)
    for start in range(0, size, chunk_size):
        stop = min(start + chunk_size, size)
        basis = _basis_block(start, stop, batch, size, x)
        if method == "rev":
            block = operator.rmatmat(basis)  # rows start..stop of every trajectory's J
            result[:, start:stop, :] = block.reshape(stop - start, batch, size).transpose(0, 1)
        else:
            block = jacobian_matmat(looped_map, x, basis)  # columns start..stop
            result[:, :, start:stop] = block.reshape(stop - start, batch, size).permute(1, 2, 0)
    return result.detach().reshape(*batch_shape, size, size)


def _basis_block(start: int, stop: int, batch: int, size: int, x: torch.Tensor) -> torch.Tensor:
    """Unit vectors ``e_start..e_{stop-1}``, each repeated across the batch, shaped ``[n, *x.shape]``."""
    n = stop - start
    basis = torch.zeros(n, batch, size, dtype=x.dtype, device=x.device)
    index = torch.arange(n, device=x.device)
    basis[index, :, start + index] = 1.0
    return basis.reshape(n, *x.shape)


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"
