"""JSON for reports: NaN / Inf survive (as JSON-pointer-addressed markers), arrays kept compact."""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from .._io import atomic_write_text
from ._schema import (
    FORMAT, FORMAT_VERSION, _FLOAT_DICT_KEYS, _FLOAT_LIST_FIELDS, _FLOAT_SCALAR_FIELDS, _SPECTRAL_NORM_FLOAT_KEYS,
)
from ._values import _plain


_NONFINITE_VALUES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _pointer_token(key) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _encode(value, pointer: str, nonfinite: dict, typed: bool):
    """Replace non-finite floats by None, recording them in ``nonfinite`` (NaN at a typed position needs no entry)."""
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            if not typed:
                nonfinite[pointer] = "nan"
        else:
            nonfinite[pointer] = "inf" if value > 0 else "-inf"
        return None
    if isinstance(value, dict):
        return {k: _encode(v, f"{pointer}/{_pointer_token(k)}", nonfinite, typed) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v, f"{pointer}/{i}", nonfinite, typed) for i, v in enumerate(value)]
    return value


def _encode_row(row: dict, pointer: str, nonfinite: dict) -> dict:
    out = {}
    for name, value in row.items():
        where = f"{pointer}/{name}"
        if name in _FLOAT_LIST_FIELDS:
            out[name] = _encode(value, where, nonfinite, typed=isinstance(value, list))
        elif name in _FLOAT_SCALAR_FIELDS:
            out[name] = _encode(value, where, nonfinite, typed=True)
        elif name in _FLOAT_DICT_KEYS and isinstance(value, dict):
            keys = _FLOAT_DICT_KEYS[name]
            out[name] = {
                k: _encode(v, f"{where}/{_pointer_token(k)}", nonfinite, typed=k in keys) for k, v in value.items()
            }
        elif name == "spectral_norm" and isinstance(value, list):
            out[name] = [
                {k: _encode(v, f"{where}/{i}/{_pointer_token(k)}", nonfinite, typed=k in _SPECTRAL_NORM_FLOAT_KEYS)
                 for k, v in entry.items()} if isinstance(entry, dict)
                else _encode(entry, f"{where}/{i}", nonfinite, False)
                for i, entry in enumerate(value)
            ]
        else:
            out[name] = _encode(value, where, nonfinite, typed=False)
    return out


def _set_pointer(document, pointer: str, value) -> None:
    if not isinstance(pointer, str) or not pointer.startswith("/"):
        raise ValueError(f"invalid report: nonfinite key {pointer!r} is not a JSON Pointer")
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]
    target = document
    try:
        for token in tokens[:-1]:
            target = target[int(token)] if isinstance(target, list) else target[token]
        last = tokens[-1]
        if isinstance(target, list):
            target[int(last)] = value
        elif isinstance(target, dict) and last in target:
            target[last] = value
        else:
            raise KeyError(last)
    except (KeyError, IndexError, ValueError, TypeError):
        raise ValueError(
            f"invalid report: nonfinite entry {pointer!r} points to nothing in the file (was it edited by hand?)"
        ) from None


# A JSON array of numbers as json.dumps(indent=...) lays it out: one number per line. The raw newlines can only be
# layout (inside JSON strings a newline is always escaped), so this never touches string contents.
_JSON_SCALAR = r"(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|null|true|false)"


_NUMBER_ARRAY = re.compile(r"\[\n\s*(" + _JSON_SCALAR + r"(?:,\n\s*" + _JSON_SCALAR + r")*)\n\s*\]")


def _collapse_array(match) -> str:
    return "[" + ", ".join(item.strip() for item in match.group(1).split(",")) + "]"


def report_to_json(report, path=None) -> str:
    nonfinite: dict = {}
    rows = [_encode_row(row.to_dict(), f"/rows/{i}", nonfinite) for i, row in enumerate(report.rows)]
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "provenance": _encode(_plain(report.provenance, "Report.provenance"), "/provenance", nonfinite, False),
        "notes": _encode(_plain(report.notes, "Report.notes"), "/notes", nonfinite, False),
        "rows": rows,
        "nonfinite": nonfinite,
    }
    text = _NUMBER_ARRAY.sub(_collapse_array, json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False))
    text += "\n"
    if path is not None:
        atomic_write_text(path, text)
    return text


def report_from_json(report_class, source):
    if isinstance(source, (bytes, bytearray)):
        text = source.decode("utf-8")
    elif isinstance(source, str) and source.lstrip().startswith("{"):
        text = source
    elif isinstance(source, (str, os.PathLike)):
        text = Path(source).read_text(encoding="utf-8")
    else:
        raise TypeError(f"Report.from_json expected a path or JSON text, got {type(source).__name__}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not a jacobiscope report: invalid JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a jacobiscope report: expected a JSON object, got {type(data).__name__}")
    if "format" in data and data["format"] != FORMAT:
        raise ValueError(f"not a jacobiscope report: format is {data['format']!r}, expected {FORMAT!r}")
    version = data.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"this report has format_version {version!r}; this jacobiscope reads up to {FORMAT_VERSION}. "
            "Upgrade jacobiscope (pip install -U jacobiscope) to read it."
        )
    for pointer, kind in (data.get("nonfinite") or {}).items():
        _set_pointer(data, pointer, _NONFINITE_VALUES.get(kind, kind))
    return report_class.from_dict(data)
