"""The argument checks every module shares: one wording for each kind of mistake.

Example::

    >>> from jacobiscope._validation import positive_int
    >>> positive_int(3, "loops")
    3
    >>> positive_int(True, "loops")
    Traceback (most recent call last):
    ...
    jacobiscope.errors.ArgumentError: loops must be a positive int, got True.
"""
from __future__ import annotations

from .errors import ArgumentError

__all__ = ["positive_int", "nonnegative_int"]


def _is_int(value) -> bool:
    # bool is an int subclass, but True is never a count
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value, name: str) -> int:
    """``value`` if it is an int >= 1, else `ArgumentError` naming ``name`` and what came."""
    if not _is_int(value) or value < 1:
        raise ArgumentError(f"{name} must be a positive int, got {value!r}.")
    return value


def nonnegative_int(value, name: str) -> int:
    """``value`` if it is an int >= 0, else `ArgumentError` naming ``name`` and what came."""
    if not _is_int(value) or value < 0:
        raise ArgumentError(f"{name} must be a non-negative int, got {value!r}.")
    return value
