"""Argument checks shared by the attention-indexed model's flows and runs (`jacobiscope.theory.aim`): finite numbers
in range and square, finite, same-sized matrices, each refused naming the value and the fix before any work."""
from __future__ import annotations

import math
import numbers

import torch

from ..errors import ArgumentError


def finite(value, name: str, *, low: float | None = None, high: float | None = None, open_low: bool = True,
           example: str = "1.0") -> float:
    """A finite real (not a bool) in ``(low, high)`` (``[low, ...`` when not ``open_low``); as a float."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if open_low else value >= low
    if ok and high is not None:
        ok = value < high
    if not ok:
        span = ("" if low is None and high is None else
                f" in {'(' if open_low else '['}{'-inf' if low is None else f'{low:g}'}, "
                f"{'inf' if high is None else f'{high:g}'})")
        raise ArgumentError(f"{name} must be a finite number{span}, got {value!r:.60} — pass e.g. {name}={example}")
    return float(value)


def count(value, name: str, example: str = "1") -> int:
    """A positive int (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ArgumentError(f"{name} must be a positive int, got {value!r:.60} — pass e.g. {name}={example}")
    return int(value)


def square(matrix, name: str, d: int | None = None) -> torch.Tensor:
    """A finite real ``[..., d, d]`` tensor (``d`` the teacher's when given)."""
    if not isinstance(matrix, torch.Tensor) or matrix.dim() < 2 or matrix.shape[-1] != matrix.shape[-2]:
        shown = tuple(matrix.shape) if isinstance(matrix, torch.Tensor) else type(matrix).__name__
        raise ArgumentError(f"{name} must be a square matrix tensor [..., d, d], got {shown} — pass e.g. "
                            "make_teacher(d)")
    if d is not None and matrix.shape[-1] != d:
        raise ArgumentError(f"{name} must be [..., {d}, {d}] like the teacher, got {tuple(matrix.shape)}")
    if matrix.is_complex() or not matrix.is_floating_point():
        raise ArgumentError(f"{name} must be a real floating matrix, got {matrix.dtype} — pass e.g. .double()")
    if not bool(torch.isfinite(matrix).all()):
        raise ArgumentError(f"{name} holds {int((~torch.isfinite(matrix)).sum())} NaN/Inf entries — pass a finite "
                            "matrix")
    return matrix
