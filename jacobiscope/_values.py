"""Plain-Python values for results and reports: conversion, NaN-aware comparison, number formatting.

The base layer: diagnostics (their results' JSON form and table cells) and the report both use it.
"""
from __future__ import annotations

import math
import os
from dataclasses import fields


def _plain(value, where: str):
    """Plain JSON-able Python values; tensors and NumPy values through ``tolist()``, dtypes/devices/paths as str."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 14_000:
        # ~4,200 digits: Python's int <-> str limit; json would refuse to write it (or read it back)
        raise TypeError(f"{where} is an int of about {int(value.bit_length() * 0.30103):,} digits, which JSON "
                        "readers refuse; store it as a float or a str")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where} has the key {key!r} ({type(key).__name__}); JSON keys are strings, so it would come "
                    f"back as {str(key)!r}. Use str keys."
                )
            out[key] = _plain(item, f"{where}[{key!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if hasattr(value, "tolist"):  # torch.Tensor, numpy arrays and scalars
        return _plain(value.tolist(), where)
    if isinstance(value, os.PathLike) or type(value).__module__.startswith("torch") and type(value).__name__ in (
        "dtype", "device"
    ):
        return str(value)
    if isinstance(value, complex):
        raise TypeError(f"{where} is complex ({value!r}); store it as [re, im]")
    raise TypeError(
        f"{where} is a {type(value).__name__}, which JSON cannot hold; store a float, int, str, bool, None, "
        "list or dict"
    )


def _plain_or_raw(obj):
    try:
        return obj.to_dict()
    except TypeError:
        return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _same(a, b) -> bool:
    """Equality of plain values where NaN equals NaN (and only NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return a == b


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nulls_to_nan(value):
    if value is None:
        return math.nan
    if isinstance(value, list):
        return [_nulls_to_nan(item) for item in value]
    return value


def _last(values):
    return values[-1] if isinstance(values, (list, tuple)) and values else None


def _finite_or_nan(values) -> list:
    """Floats for matplotlib: None and +-Inf become NaN (a gap in the line) instead of breaking the axis limits."""
    out = []
    for value in values or []:
        out.append(float(value) if _is_number(value) and math.isfinite(value) else math.nan)
    return out


def _num(value, spec: str = ".3g") -> str:
    """A table cell for a number: ``-`` for None (not measured), ``nan`` / ``inf`` spelled out."""
    if value is None:
        return "-"
    if not _is_number(value):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return format(value, spec)


def _single_line(text: str) -> str:
    return " ".join(text.split())


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."
