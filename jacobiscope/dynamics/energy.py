"""The pseudo-energy ``E_t = -Tr(X_t^T Y_t)`` of a looped map with a drive ``Y_t``."""
from __future__ import annotations

import torch

from ..errors import ArgumentError, StateError
from ..maps import LoopedMap

__all__ = ["pseudo_energy"]


def pseudo_energy(states: torch.Tensor, drive, *, batch_dims: int | None = None) -> torch.Tensor:
    """``E = -Tr(X^T Y) = -sum(X * Y)`` over each state's entries, at the pre-update state.

    Example::

        >>> import torch, jacobiscope
        >>> X = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
        >>> jacobiscope.pseudo_energy(X, 3 * X, batch_dims=0)
        tensor(-15.)

    Arguments:
        states: one state ``[*batch, *state]`` or a trajectory ``[T, *batch, *state]`` (e.g. from
            ``LoopedMap.trajectory``).
        drive: the drive ``Y`` as a tensor of the same shape, or a `LoopedMap` with a drive (``Y_t`` is then
            computed from each state; for attention maps ``Y = Attn(X) + C``).
        batch_dims: for a tensor drive, how many leading dims index separate states (default 0: one energy).
            For a `LoopedMap` drive it is inferred: the map's own batch dims plus any leading (time) dims
            beyond the map's state (known from ``state_shape`` or ``x0``).

    Returns:
        The energies, one per leading index (``[T, *batch]`` for a trajectory).

    This is the pseudo-energy of Tomihari & Karakida (NeurIPS 2025) and the "energy" AKOrN logs: for an
    energy-admitting attention it decreases along the loop; for a general one it is a monitor, not a Lyapunov
    function.
    """
    if not isinstance(states, torch.Tensor):
        raise StateError(f"states must be a torch.Tensor [T, *batch, *state] or [*batch, *state], got "
                         f"{type(states).__name__} — pass e.g. looped_map.trajectory(x0, steps).")
    if states.is_complex() or states.dtype == torch.bool:
        raise StateError(f"states must be real numbers, got {states.dtype} — pass states.float().")
    if isinstance(drive, LoopedMap):
        if batch_dims is not None:
            _check_keep(batch_dims, states)
        looped_map = drive
        if looped_map.state_shape is not None:
            per_call_dims = looped_map.batch_dims + len(looped_map.state_shape)
        elif looped_map.x0 is not None:
            per_call_dims = looped_map.x0.dim()
        else:
            per_call_dims = states.dim()
        extra = states.dim() - per_call_dims
        if extra < 0:
            raise StateError(f"states has {states.dim()} dims but one state of '{looped_map.name}' has {per_call_dims}.")
        flat = states.reshape(-1, *states.shape[extra:])
        with torch.no_grad():
            Y = torch.stack([looped_map.drive(state) for state in flat]).reshape(states.shape)
        keep = extra + looped_map.batch_dims
    else:
        if not isinstance(drive, torch.Tensor):
            raise StateError(f"drive must be a tensor shaped like the states or a LoopedMap with a drive, got "
                             f"{type(drive).__name__} — pass the drive Y_t, or the map.")
        Y = drive
        # A negative or too large batch_dims used to sum over the wrong dimensions without a word.
        keep = 0 if batch_dims is None else _check_keep(batch_dims, states)
    if Y.shape != states.shape:
        raise StateError(f"The drive Y must have the shape of the states, {tuple(states.shape)}; got {tuple(Y.shape)}.")
    return -(states * Y).reshape(*states.shape[:keep], -1).sum(-1)


def _check_keep(batch_dims, states: torch.Tensor) -> int:
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, int) or not 0 <= batch_dims <= states.dim():
        raise ArgumentError(f"batch_dims must be an int in [0, {states.dim()}] for states of shape "
                            f"{tuple(states.shape)}, got {batch_dims!r} — pass the number of leading dims that index "
                            "separate states (0: one energy).")
    return batch_dims
