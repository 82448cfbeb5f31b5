"""Argument checks and small tensor helpers shared by the token-dynamics modules (`jacobiscope.theory.tokens`)."""
from __future__ import annotations

import torch

from ..errors import ArgumentError
from ._aim_checks import finite

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
        M = M.to(dtype=dtype, device=device if device is not None else M.device)
        if not bool(torch.isfinite(M).all()):  # a NaN entry gave a NaN flow and a verdict read from it
            raise ArgumentError(f"{name} holds {int((~torch.isfinite(M)).sum())} NaN/Inf entries — pass a finite "
                                "matrix")
        out.append(M)
    if out[0].device != out[1].device:
        raise ArgumentError(f"A and V must be on one device, got {out[0].device} and {out[1].device}.")
    return out[0], out[1]


def _check_real(value, name: str, *, positive: bool = False, nonzero: bool = False, example: str = "1.0") -> float:
    """A finite real number (not a bool), > 0 with ``positive``, != 0 with ``nonzero``; as a float."""
    value = finite(value, name, low=0 if positive else None, example=example)
    if nonzero and value == 0:
        raise ArgumentError(f"{name} must be a finite non-zero number, got 0 — pass e.g. {name}={example}")
    return value


def _check_z0(z0):
    """The initial order parameter ``R_2 = <e^{i theta}>``: a complex number (or complex tensor) in the closed unit
    disc — the mean of unit vectors cannot lie outside it."""
    if isinstance(z0, torch.Tensor):
        values = z0.detach().to(torch.complex128)
    else:
        try:
            values = torch.tensor(complex(z0), dtype=torch.complex128)
        except (TypeError, ValueError):
            raise ArgumentError(f"z0 must be a complex number in the unit disc (the initial R_2 = <e^(i theta)>), got "
                                f"{z0!r:.60} — pass e.g. z0=0.3+0.1j") from None
    if not bool(torch.isfinite(values).all()) or bool((values.abs() > 1 + 1e-12).any()):
        raise ArgumentError(f"z0 must be a complex number in the unit disc |z| <= 1 (R_2 = <e^(i theta)> is a mean of "
                            f"unit vectors), got {z0!r:.60} — pass e.g. z0=0.3+0.1j")
    return z0
