"""`DiagnosticResult`: the typed result every diagnostic returns — its JSON form, its table cells, its DataFrame
scalars, its glossary, its figure and the checks a loaded one must pass. The report renders only through this.

Example::

    >>> from dataclasses import dataclass
    >>> from jacobiscope.diagnostics import DiagnosticResult
    >>> @dataclass
    ... class Drift(DiagnosticResult):
    ...     value: float
    ...     headers = ("drift",)
    ...     glossary = {"drift": ("per loop", "mean change of the state per loop.")}
    ...     def columns(self):
    ...         return {"drift": self.value}
    >>> Drift(0.25).scalars(), Drift.from_dict(Drift(0.25).to_dict()) == Drift(0.25)
    ({'value': 0.25}, True)
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields
from typing import ClassVar, NamedTuple

from .._values import _is_number, _plain, _shorten

__all__ = ["DiagnosticResult", "FigureEntry"]


class FigureEntry(NamedTuple):
    """One row as a figure draws it: the row (its trajectory and identity), this diagnostic's result on it (None
    when the row does not carry one), its legend label and its color."""

    row: object
    result: object
    label: str
    color: object


@dataclass
class DiagnosticResult:
    """Base of typed results: a ``@dataclass`` whose fields are plain values (numbers, str, lists, dicts).

    What a subclass may declare (all optional; a user's result gets text, DataFrame, JSON, HTML and a display from
    them with no other code):

    - ``columns()``: its summary-table cells ``{header: value}``; ``headers`` (class attribute) lists them in order.
    - ``scalars()``: its DataFrame columns ``{name: number or str}`` (default: every top-level number, str or bool
      field); the report prefixes them with the diagnostic's name (``"drift.value"``).
    - ``glossary``: ``{header: (unit, meaning)}`` for the summary table's glossary.
    - ``panels`` and ``draw(axes, entries)``: its figure, drawn on ``panels`` Axes (None: one per row that carries
      a result) from a list of `FigureEntry`.
    - ``problems(name)``: what is wrong with a loaded result's types (sentences); ``relation_problems(name, row)``:
      what contradicts its row (a loop beyond ``row.loops``).
    """

    headers: ClassVar[tuple] = ()
    scalar_names: ClassVar[tuple] = ()
    glossary: ClassVar[dict] = {}
    panels: ClassVar[int | None] = 0
    figure_size: ClassVar[tuple | None] = None

    # ------------------------------------------------------------------ JSON form

    def to_dict(self, where: str | None = None) -> dict:
        """Plain JSON-able values by field; a value JSON cannot hold is a TypeError naming ``where.field``."""
        where = where or type(self).__name__
        return {f.name: _plain(getattr(self, f.name), f"{where}.{f.name}") for f in fields(self)}

    @classmethod
    def from_dict(cls, data):
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}.from_dict expected a dict, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in data]
        unknown = [key for key in data if key not in names]
        if missing or unknown:
            raise ValueError(f"{cls.__name__}.from_dict: expected keys {', '.join(names)}; "
                             f"missing {missing or 'none'}, unknown {unknown or 'none'}")
        return cls(**{name: data[name] for name in names if name in data})

    # ------------------------------------------------------------------ what the report shows

    def columns(self) -> dict:
        """Summary-table cells ``{header: value}`` (numbers are formatted and right-aligned by the table)."""
        return {}

    def scalars(self) -> dict:
        """DataFrame columns ``{name: value}``: every top-level number, str or bool field by default."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if isinstance(getattr(self, f.name), (int, float, str, bool)) or getattr(self, f.name) is None}

    @classmethod
    def draw(cls, axes, entries) -> None:
        """Draw this kind of result for ``entries`` (`FigureEntry` list) on ``axes`` (``panels`` of them)."""
        raise NotImplementedError(f"{cls.__name__} declares no figure (set panels and define draw(axes, entries))")

    # ------------------------------------------------------------------ checks of a loaded result

    def problems(self, name: str) -> list[str]:
        """Fields of the wrong type, as sentences naming ``name[field]`` (empty when fine)."""
        return []

    def relation_problems(self, name: str, row) -> list[str]:
        """What contradicts the row it sits on (e.g. a loop index beyond ``row.loops``)."""
        return []

    # ------------------------------------------------------------------ read like the dict it is stored as

    def __getitem__(self, key: str):
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self):
        return [f.name for f in fields(self)]


# ---------------------------------------------------------------------- helpers for the built-in results' checks

def bad(where: str, value, expected: str) -> str:
    """One type-problem sentence: ``"lyapunov['stderr'] is 'x' (str), expected a list of numbers"``."""
    return f"{where} is {_shorten(repr(value), 40)} ({type(value).__name__}), expected {expected}"


def numbers(value) -> bool:
    return isinstance(value, list) and all(_is_number(item) for item in value)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def finite_max(values) -> float:
    finite = [v for v in values if _is_number(v) and math.isfinite(v)]
    return max(finite) if finite else math.nan


def last(values):
    return values[-1] if isinstance(values, (list, tuple)) and values else None
