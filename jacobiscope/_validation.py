"""The argument checks every module shares: one wording for each kind of mistake, naming the fix.

Example::

    >>> from jacobiscope._validation import positive_int
    >>> positive_int(3, "loops")
    3
    >>> positive_int(True, "loops")
    Traceback (most recent call last):
    ...
    jacobiscope.errors.ArgumentError: loops must be a positive int, got True — pass an int >= 1, e.g. loops=1.
"""
from __future__ import annotations

import math
import operator

from .errors import ArgumentError

__all__ = ["positive_int", "nonnegative_int", "optional_positive_int", "seed_int", "tolerance", "positive_number",
           "floating_dtype"]


def _is_int(value) -> bool:
    # bool is an int subclass, but True is never a count
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value, name: str) -> int:
    """``value`` if it is an int >= 1, else `ArgumentError` naming ``name`` and what came."""
    if not _is_int(value) or value < 1:
        raise ArgumentError(f"{name} must be a positive int, got {value!r} — pass an int >= 1, e.g. {name}=1.")
    return value


def nonnegative_int(value, name: str) -> int:
    """``value`` if it is an int >= 0, else `ArgumentError` naming ``name`` and what came."""
    if not _is_int(value) or value < 0:
        raise ArgumentError(f"{name} must be a non-negative int, got {value!r} — pass an int >= 0, e.g. {name}=0.")
    return value


def optional_positive_int(value, name: str) -> int | None:
    """``None`` or an int >= 1 (a chunk size: ``None`` means all at once)."""
    if value is not None and (not _is_int(value) or value < 1):
        raise ArgumentError(f"{name} must be None or a positive int, got {value!r} — pass {name}=None (no chunking) "
                            f"or an int >= 1.")
    return value


def seed_int(value, name: str = "seed") -> int:
    """An int seed (numpy integers too, never a bool: ``seed=True`` is a mistake, not seed 1)."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise ArgumentError(f"{name} must be an int, got {value!r} — pass an int such as {name}=0.")


def tolerance(value, name: str = "tol", *, allow_none: bool = True) -> float | None:
    """A finite number >= 0 (``None`` for the default when ``allow_none``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        default = " (or None for the default)" if allow_none else ""
        raise ArgumentError(f"{name} must be a finite number >= 0, got {value!r} — pass e.g. {name}=1e-6{default}.")
    return float(value)


def positive_number(value, name: str, *, allow_none: bool = True) -> float | None:
    """A finite number > 0 (``None`` for the default when ``allow_none``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        default = " (or None for the default)" if allow_none else ""
        raise ArgumentError(f"{name} must be a finite number > 0, got {value!r} — pass a positive number{default}.")
    return float(value)


def floating_dtype(value, name: str = "dtype"):
    """``None`` or a floating ``torch.dtype`` (a string such as ``"float64"`` is a mistake worth naming)."""
    import torch

    if value is None:
        return None
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        hint = f"torch.{value}" if isinstance(value, str) and isinstance(getattr(torch, value, None), torch.dtype) else (
            "torch.float32 or torch.float64")
        raise ArgumentError(f"{name} must be a floating torch.dtype, got {value!r} — pass {name}={hint}.")
    return value
