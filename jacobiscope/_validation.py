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
import os
import warnings

from .errors import ArgumentError

__all__ = ["positive_int", "nonnegative_int", "optional_positive_int", "seed_int", "tolerance", "positive_number",
           "floating_dtype", "BUDGETS", "budget", "within_budget", "clamped_count", "as_int", "did_you_mean",
           "one_of"]

#: The budgets of the sizes a user controls: a value beyond its budget is refused before any work starts (a typo such
#: as ``loops=10**9`` would otherwise run for hours). Each can be raised for one process with the environment
#: variable ``JACOBISCOPE_MAX_<NAME>`` (e.g. ``JACOBISCOPE_MAX_LOOPS=1000000``) when a run that long is meant.
#:
#: - ``loops``: applications of the underlying step in one trajectory (``power(p)`` counts ``p`` per loop): one
#:   forward each plus the diagnostics' products; 100,000 loops of a small map already take minutes.
#: - ``power``: the ``p`` of ``LoopedMap.power(p)`` (one application of ``F^p`` runs ``p`` steps).
#: - ``k``: Lyapunov tangent vectors (``k`` jvps per loop, a ``k x D`` frame).
#: - ``eigen_k``: eigenvalues sought by Arnoldi (a basis of about ``2 eigen_k`` vectors, restarted).
#: - ``spectral_samples``: loops at which ``||J||_2`` is measured (a Lanczos run each).
#: - ``iterations``: iterations of an iterative solver (Lanczos ``max_iter``, Arnoldi ``max_restarts``).
#: - ``resamples``: bootstrap resamples of a correlation (`jacobiscope.recipes.per_example`).
BUDGETS = {"loops": 100_000, "power": 100_000, "k": 1024, "eigen_k": 1024, "spectral_samples": 1024,
           "iterations": 100_000, "resamples": 1_000_000}


def _is_int(value) -> bool:
    # bool is an int subclass, but True is never a count; numpy integers (and 0-d integer tensors) are ints
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        return False
    if isinstance(value, int):
        return True
    if getattr(value, "dtype", None) is not None and "bool" in str(value.dtype):
        return False
    if getattr(value, "shape", ()) not in ((), None) and len(getattr(value, "shape", ())) != 0:
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def as_int(value) -> int:
    """A plain ``int`` of a value `_is_int` accepts (numpy integers would not serialize to JSON)."""
    return int(operator.index(value))


def positive_int(value, name: str) -> int:
    """``value`` as an int if it is an int >= 1 (numpy integers too, never a bool), else `ArgumentError` naming
    ``name`` and what came."""
    if not _is_int(value) or value < 1:
        raise ArgumentError(f"{name} must be a positive int, got {value!r} — pass an int >= 1, e.g. {name}=1.")
    return as_int(value)


def nonnegative_int(value, name: str) -> int:
    """``value`` as an int if it is an int >= 0, else `ArgumentError` naming ``name`` and what came."""
    if not _is_int(value) or value < 0:
        raise ArgumentError(f"{name} must be a non-negative int, got {value!r} — pass an int >= 0, e.g. {name}=0.")
    return as_int(value)


def optional_positive_int(value, name: str) -> int | None:
    """``None`` or an int >= 1 (a chunk size: ``None`` means all at once)."""
    if value is not None and (not _is_int(value) or value < 1):
        raise ArgumentError(f"{name} must be None or a positive int, got {value!r} — pass {name}=None (no chunking) "
                            f"or an int >= 1.")
    return None if value is None else as_int(value)


def budget(kind: str) -> int:
    """The budget of ``kind`` (a key of `BUDGETS`), raised by ``JACOBISCOPE_MAX_<KIND>`` when set.

    Example::

        >>> from jacobiscope._validation import budget
        >>> budget("loops")
        100000
    """
    variable = f"JACOBISCOPE_MAX_{kind.upper()}"
    raw = os.environ.get(variable)
    if raw is None or not raw.strip():
        return BUDGETS[kind]
    try:
        value = int(raw.strip())
    except ValueError:
        raise ArgumentError(f"{variable}={raw!r} is not an int — set it to a positive int (the budget), or unset it "
                            f"for the default {BUDGETS[kind]}") from None
    if value < 1:
        raise ArgumentError(f"{variable}={raw!r} must be a positive int — set it to e.g. {BUDGETS[kind]}, or unset it")
    return value


def within_budget(value, name: str, kind: str | None = None, *, per_unit: int = 1, unit: str | None = None,
                  state_bytes: int | None = None) -> int:
    """``value`` (a positive int, checked) if ``value * per_unit`` is within the budget of ``kind`` (default: the
    budget named ``name``), else `ArgumentError` naming the budget and the fix — before any work starts.

    Example::

        >>> from jacobiscope._validation import within_budget
        >>> within_budget(32, "loops")
        32
        >>> within_budget(10**9, "loops")
        Traceback (most recent call last):
        ...
        jacobiscope.errors.ArgumentError: loops=1000000000 is over the budget of 100000 loops: ... — pass loops <= 100000; ...
    """
    value = positive_int(value, name)
    kind = kind or name
    unit = unit or kind
    limit = budget(kind)
    if value * per_unit > limit:
        total = f" ({value} x {per_unit} = {value * per_unit} {unit})" if per_unit != 1 else ""
        fix = (f"pass {name} <= {max(1, limit // per_unit)}; if you mean it, raise the budget with the environment "
               f"variable JACOBISCOPE_MAX_{kind.upper()}={value * per_unit}")
        if state_bytes is None:
            raise ArgumentError(f"{name}={value} is over the budget of {limit} {unit}{total}: a run that long takes "
                                f"hours, or never ends — {fix}")
        from .errors import BudgetError

        # Every loop also keeps its state: say the memory too (a lower bound when the state size is not known yet).
        needed = (value + 1) * int(state_bytes)
        raise BudgetError(f"{name}={value} keeps {value + 1} states (at least {needed / 1e9:.3g} GB) and is over the "
                          f"budget of {limit} {unit}{total}: a run that long takes hours, or never ends — lower "
                          f"{name}: {fix}", needed, limit * int(state_bytes))
    return value


def clamped_count(value: int, limit: int, name: str, why: str, *, notes: list | None = None,
                  stacklevel: int = 3) -> int:
    """``min(value, limit)``, said: a clamp warns (`UserWarning`) and is appended to ``notes`` — never silent.

    Example::

        >>> import warnings
        >>> from jacobiscope._validation import clamped_count
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     clamped_count(10, 3, "k", "the state has D=3 entries")
        3
    """
    if value <= limit:
        return value
    message = f"{name}={value} clamped to {limit}: {why}"
    warnings.warn(message, UserWarning, stacklevel=stacklevel)
    if notes is not None and message not in notes:
        notes.append(message)
    return limit


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


def did_you_mean(value, known) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``known`` to ``value``, else ``""``.

    Example::

        >>> from jacobiscope._validation import did_you_mean
        >>> did_you_mean("cor", ["core", "cycle"]), did_you_mean("CYCLE", ["core", "cycle"])
        (" (did you mean 'core'?)", " (did you mean 'cycle'?)")
    """
    import difflib

    # without case: 'ITRSA-SUDOKU' shares no letter with 'itrsa-sudoku' to difflib, yet it is the nearest miss
    names = {str(name).lower(): str(name) for name in known}
    close = difflib.get_close_matches(str(value).lower(), list(names), n=1, cutoff=0.6)
    return f" (did you mean {names[close[0]]!r}?)" if close else ""


def one_of(value, name: str, choices: tuple, error=ArgumentError):
    """``value`` when it is one of ``choices`` (an instance of its type, equal: ``1`` is not ``True``); else ``error`` naming
    them, with the closest one for a misspelt str.

    Example::

        >>> from jacobiscope._validation import one_of
        >>> one_of("qr", "method", ("qr", "two_trajectory"))
        'qr'
        >>> one_of("two-trajectory", "method", ("qr", "two_trajectory"))
        Traceback (most recent call last):
        ...
        jacobiscope.errors.ArgumentError: method must be 'qr' or 'two_trajectory', got 'two-trajectory' (did you mean 'two_trajectory'?) — pass one of them.
    """
    if any(isinstance(value, type(choice)) and isinstance(value, bool) == isinstance(choice, bool) and value == choice
           for choice in choices):  # a str subclass (numpy.str_) is its str; 1 is not True
        return value
    listing = ", ".join(map(repr, choices[:-1])) + f" or {choices[-1]!r}" if len(choices) > 1 else repr(choices[0])
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    hint = did_you_mean(value, [c for c in choices if isinstance(c, str)]) if isinstance(value, str) else ""
    raise error(f"{name} must be {listing}, got {shown}{hint} — pass one of them.")
