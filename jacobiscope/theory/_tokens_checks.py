"""Argument checks and small tensor helpers shared by the token-dynamics modules (`jacobiscope.theory.tokens`)."""
from __future__ import annotations

import torch

from ..errors import ArgumentError

_ATTENTIONS = ("linear", "softmax")


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
