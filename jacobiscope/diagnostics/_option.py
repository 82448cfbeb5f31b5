"""`Option`: one setting a diagnostic reads from ``context.options`` — its kind, default and budget, checked once.

Example::

    >>> from jacobiscope.diagnostics import Option
    >>> Option("thresholds", (1e-2, 1e-3)).check([0.1, 0.01], "halting_thresholds", "halting")
    [0.1, 0.01]
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch

from ..errors import ArgumentError

__all__ = ["Option"]


_KINDS = {
    "count": ("an int >= 1", "8"),
    "index": ("an int >= 0", "4"),
    "tolerance": ("a finite number >= 0", "1e-2"),
    "positive": ("a finite number > 0", "0.1"),
    "probability": ("a number in [0, 1]", "0.5"),
    "thresholds": ("a non-empty list of finite numbers > 0", "[1e-2, 1e-3]"),
    "seed": ("an int", "0"),
    "flag": ("a bool", "True"),
}


@dataclass(frozen=True)
class Option:
    """One option a diagnostic reads from ``context.options``: its kind, default and budget.

    Example::

        >>> from jacobiscope.diagnostics import Option
        >>> Option("count", 8, maximum=64).check(16, "basin_starts", "fixed_points")
        16
        >>> Option("count", 8, maximum=64).check(True, "basin_starts", "fixed_points")
        Traceback (most recent call last):
        ...
        jacobiscope.errors.ArgumentError: fixed_points option basin_starts must be an int >= 1, got True (bool) — pass e.g. basin_starts=8.

    Kinds: ``count`` (int >= 1), ``index`` (int >= 0), ``tolerance`` (finite >= 0), ``positive`` (finite > 0),
    ``probability`` (in [0, 1]), ``thresholds`` (a non-empty list of finite numbers > 0), ``seed`` (an int), ``flag``
    (a bool). A bool is never a number here. ``maximum`` is the budget of a count (or of a list's length): a larger
    value is refused before any work, naming the budget.
    """

    kind: str
    default: object = None
    maximum: float | None = None
    doc: str = ""

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ArgumentError(f"Option kind {self.kind!r} is unknown — use one of {', '.join(_KINDS)}")

    def check(self, value, name: str, owner: str):
        """``value`` converted to its plain type, or `ArgumentError` naming the option, its owner and the fix."""
        expected, example = _KINDS[self.kind]
        where = f"{owner} option {name}" if owner else name

        def refuse(extra=""):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise ArgumentError(f"{where} must be {expected}{extra}, got {shown} ({type(value).__name__}) — pass "
                                f"e.g. {name}={example}.")

        if self.kind == "flag":
            if not isinstance(value, bool):
                refuse()
            return value
        if self.kind == "thresholds":
            if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
                refuse()
            items = list(value.tolist() if hasattr(value, "tolist") else value)
            if not items or not all(_is_real(item) and math.isfinite(item) and item > 0 for item in items):
                refuse()
            if self.maximum is not None and len(items) > self.maximum:
                raise ArgumentError(f"{where} has {len(items)} entries, over the budget of {int(self.maximum)} — "
                                    f"pass at most {int(self.maximum)} (e.g. {name}={example}).")
            return [float(item) for item in items]
        if self.kind in ("count", "index", "seed"):
            if isinstance(value, bool):
                refuse()
            try:
                number = operator.index(value)  # numpy ints too; 2.0 or "8" are mistakes worth naming
            except TypeError:
                refuse()
            if (self.kind == "count" and number < 1) or (self.kind == "index" and number < 0):
                refuse()
            if self.maximum is not None and number > self.maximum:
                raise ArgumentError(f"{where}={number} is over the budget of {int(self.maximum):,} (the work grows "
                                    f"with it) — pass at most {name}={int(self.maximum)}.")
            return int(number)
        if not _is_real(value) or not math.isfinite(float(value)):
            refuse()
        value = float(value)
        if (self.kind == "tolerance" and value < 0) or (self.kind == "positive" and value <= 0) or (
                self.kind == "probability" and not 0 <= value <= 1):
            refuse()
        if self.maximum is not None and value > self.maximum:
            raise ArgumentError(f"{where}={value!r} is over the limit of {self.maximum!r} — pass at most "
                                f"{name}={self.maximum!r}.")
        return float(value)


def _is_real(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, torch.Tensor):  # a one-number tensor of a real dtype (not a bool, not complex)
        return value.numel() == 1 and value.dim() == 0 and not value.is_complex() and value.dtype != torch.bool
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf" and (
        getattr(value, "ndim", 0) == 0)
