"""JSON for reports: NaN / Inf survive (as JSON-pointer-addressed markers), arrays kept compact."""
from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import stat
from pathlib import Path

from .._io import NotARegularFileError, atomic_write_text, check_file_path, path_error
from ..errors import ReportFormatError, ReportSourceError  # noqa: F401 - their old import path
from .._values import _plain
from ..diagnostics._legacy import upgrade_row
from ._schema import FORMAT, FORMAT_VERSION, LayerResult


logger = logging.getLogger(__name__)

_NONFINITE_VALUES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


_FIX = "pass a file written by Report.to_json or 'jacobiscope analyze --json'"


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


# The row's own float positions: a null there is NaN (no "nonfinite" entry needed, and a file of another tool that
# writes NaN as a bare null reads right). Everywhere else (results, provenance) NaN is recorded in "nonfinite".
_FLOAT_FIELDS = ("state_norm", "step_size", "seconds")


def _encode_row(row: dict, pointer: str, nonfinite: dict) -> dict:
    return {name: _encode(value, f"{pointer}/{name}", nonfinite, typed=name in _FLOAT_FIELDS)
            for name, value in row.items()}


def upgrade(document: dict) -> dict:
    """A parsed report document (its non-finite values restored) in the current format: a ``format_version`` 1
    document's rows get their six original diagnostics and ``extra`` moved into ``results``.

    Example::

        >>> from jacobiscope.report import upgrade
        >>> old = {"format": "jacobiscope-report", "format_version": 1, "provenance": {}, "notes": [], "rows": [
        ...     {"input_index": 0, "input_label": "x", "layer": 0, "mode": "loop", "eta": None, "loops": 1,
        ...      "state_shape": [2], "state_norm": [1.0, 1.0], "step_size": [0.0], "spectral_norm": [],
        ...      "eigenvalues": None, "eigen_loop": None, "oscillation": None, "lyapunov": None, "clusters": None,
        ...      "energy": None, "regime": "converging", "evidence": {}, "flags": [], "seconds": 0.0,
        ...      "extra": {"halting": {"tokens": 1}}}]}
        >>> new = upgrade(old)
        >>> new["format_version"], sorted(new["rows"][0]["results"])
        (2, ['halting', 'regime'])
    """
    version = document.get("format_version", 1)
    if version >= FORMAT_VERSION:
        return document
    upgraded = dict(document, format_version=FORMAT_VERSION)
    rows = []
    for i, row in enumerate(document.get("rows") or []):
        try:
            rows.append(upgrade_row(row) if isinstance(row, dict) else row)
        except ValueError as error:
            raise ValueError(f"rows[{i}]: {error}") from None
    upgraded["rows"] = rows
    return upgraded


def _set_pointer(document, pointer: str, value) -> None:
    if not isinstance(pointer, str) or not pointer.startswith("/"):
        raise ReportFormatError(f"invalid report: nonfinite key {pointer!r} is not a JSON Pointer (it must start with '/') "
                         f"— the file was edited by hand; {_FIX}")
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
        raise ReportFormatError(
            f"invalid report: nonfinite entry {pointer!r} points to nothing in the file (was it edited by hand?) — "
            f"{_FIX}"
        ) from None


# A JSON array of numbers as json.dumps(indent=...) lays it out: one number per line. The raw newlines can only be
# layout (inside JSON strings a newline is always escaped), so this never touches string contents.
_JSON_SCALAR = r"(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|null|true|false)"


_NUMBER_ARRAY = re.compile(r"\[\n\s*(" + _JSON_SCALAR + r"(?:,\n\s*" + _JSON_SCALAR + r")*)\n\s*\]")


def _collapse_array(match) -> str:
    return "[" + ", ".join(item.strip() for item in match.group(1).split(",")) + "]"


def report_to_json(report, path=None) -> str:
    if path is not None:
        check_file_path(path, "Report.to_json")  # a bad path fails before the work, with its fix
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
    try:
        text = json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (a label cut out of a UTF-16 string): escaped as \udXXX, json reads it back as is.
            text = json.dumps(document, indent=2, ensure_ascii=True, allow_nan=False)
    except ValueError as error:  # an int of thousands of digits: Python refuses to print it
        raise ReportFormatError(f"Report.to_json: a value cannot be written as JSON ({error}) — store such numbers "
                                "as float or str") from None
    text = _NUMBER_ARRAY.sub(_collapse_array, text) + "\n"
    if path is not None:
        atomic_write_text(path, text, what="Report.to_json")
        logger.debug("report written to %s (%d rows)", os.fspath(path), len(report.rows))
    return text


def _read_source(source) -> tuple[str, str]:
    """(JSON text, how to name it in messages) from a path, JSON text or bytes."""
    if isinstance(source, (bytes, bytearray)):
        raw, name = bytes(source), "the JSON data"
    elif isinstance(source, str) and source.startswith("\ufeff"):
        return _read_source(source[1:])  # a byte-order mark kept by a decoder that did not strip it
    elif isinstance(source, str) and not source.strip():
        raise ReportFormatError(f"Report.from_json got an empty string — {_FIX} (its path or its text)")
    elif isinstance(source, str) and source.lstrip()[:1] in ("{", "["):
        return source, "the JSON text"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(os.fspath(source)).expanduser()
        name = repr(os.fspath(source))
        if "\0" in str(path):
            raise ReportFormatError(f"Report.from_json: {name} is neither JSON text nor a file path — {_FIX}")
        try:
            mode = path.stat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                # a FIFO without a writer would block the read forever; a device would be read without end
                kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
                error = NotARegularFileError(f"Report.from_json: {name} is {kind}, not a report file — pass the "
                                             f"path of a regular file; {_FIX}")
                error.errno = errno.EINVAL
                raise error
            raw = path.read_bytes()
        except NotARegularFileError:
            raise
        except FileNotFoundError:
            raise path_error(errno.ENOENT, f"Report.from_json: no such report file {name} — check the path; "
                                           f"{_FIX}") from None
        except IsADirectoryError:
            raise path_error(errno.EISDIR, f"Report.from_json: {name} is a folder — pass the report file inside it "
                                           "(e.g. report.json)") from None
        except PermissionError:
            raise path_error(errno.EACCES, f"Report.from_json: no permission to read {name} — fix its permissions "
                                           "or copy it somewhere readable") from None
        except OSError as error:
            raise path_error(error.errno, f"Report.from_json: cannot read {name} ({error.strerror or error}) — "
                                          "check the path") from None
    else:
        raise ReportSourceError(f"Report.from_json expected a path or JSON text, got {type(source).__name__} — pass e.g. "
                        "Report.from_json('report.json')")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (Windows editors) is not an error
    except UnicodeDecodeError as error:
        raise ReportFormatError(f"not a jacobiscope report: {name} is not UTF-8 text (byte {raw[error.start]:#04x} at "
                         f"offset {error.start}) — {_FIX}") from None
    if not text.strip():
        raise ReportFormatError(f"not a jacobiscope report: {name} is empty — {_FIX} (jacobiscope writes a report "
                                "whole or not at all; an interrupted analyze keeps a partial report, never an empty file)")
    return text, name


def _check_document(data, name: str) -> None:
    """The top-level structure, before anything in it is trusted."""
    if not isinstance(data, dict):
        raise ReportFormatError(f"not a jacobiscope report: {name} holds a JSON {type(data).__name__}, expected an object "
                         f"with rows, provenance and notes — {_FIX}")
    if "format" in data and data["format"] != FORMAT:
        raise ReportFormatError(f"not a jacobiscope report: format is {data['format']!r}, expected {FORMAT!r} (a file of "
                         f"another tool?) — {_FIX}")
    if "rows" not in data:
        raise ReportFormatError(f"not a jacobiscope report: {name} has no rows (keys: {', '.join(map(repr, sorted(data)))})"
                         f" — {_FIX}")
    version = data.get("format_version", 1)  # files from before the version field are format 1
    if isinstance(version, bool) or not isinstance(version, int):
        raise ReportFormatError(f"invalid report: format_version is {version!r} ({type(version).__name__}), expected an "
                         f"integer such as {FORMAT_VERSION} — the file was edited; {_FIX}")
    if version < 1:
        raise ReportFormatError(f"invalid report: format_version {version} was never written by jacobiscope (versions "
                         f"start at 1) — {_FIX}")
    if version > FORMAT_VERSION:
        raise ReportFormatError(
            f"this report has format_version {version!r}; this jacobiscope reads up to {FORMAT_VERSION} — "
            "Upgrade jacobiscope (git pull in its clone, then pip install -e .) to read it."
        )
    for key, kind, noun in (("rows", list, "a list"), ("provenance", dict, "an object"), ("notes", list, "a list"),
                            ("nonfinite", dict, "an object")):
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            raise ReportFormatError(f"invalid report: {key} is a JSON {type(value).__name__}, expected {noun} — the file "
                             f"was edited or written by another tool; {_FIX}")
    for i, row in enumerate(data["rows"]):
        if not isinstance(row, dict):
            raise ReportFormatError(f"invalid report: rows[{i}] is a JSON {type(row).__name__}, expected an object with "
                             f"the LayerResult fields — {_FIX}")
    for i, note in enumerate(data.get("notes") or []):
        if not isinstance(note, str):
            raise ReportFormatError(f"invalid report: notes[{i}] is {note!r}, expected a string — {_FIX}")
    for pointer, kind in (data.get("nonfinite") or {}).items():
        if kind not in _NONFINITE_VALUES:
            raise ReportFormatError(f"invalid report: nonfinite entry {pointer!r} is {kind!r}, expected 'nan', 'inf' or "
                             f"'-inf' — {_FIX}")


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs):
    data = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def report_from_json(report_class, source):
    text, name = _read_source(source)
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as error:
        raise ReportFormatError(f"invalid report: {name} has the key {error.args[0]!r} twice in one object (the file "
                                f"was edited or merged; JSON readers would silently keep the last) — {_FIX}") from None
    except json.JSONDecodeError as error:
        raise ReportFormatError(f"not a jacobiscope report: {name} is not valid JSON ({error.msg} at line {error.lineno} "
                         f"column {error.colno}; truncated or edited?) — {_FIX}") from None
    except RecursionError:
        raise ReportFormatError(f"not a jacobiscope report: {name} nests JSON too deeply to be a report — {_FIX}") from None
    except ValueError as error:  # e.g. an integer literal of thousands of digits
        raise ReportFormatError(f"not a jacobiscope report: {name} is not usable JSON ({error}) — {_FIX}") from None
    _check_document(data, name)
    for pointer, kind in (data.get("nonfinite") or {}).items():
        _set_pointer(data, pointer, _NONFINITE_VALUES[kind])
    try:
        data = upgrade(data)
    except (ValueError, TypeError) as error:
        raise ReportFormatError(f"invalid report: {error} — {_FIX}") from None
    rows = []
    for i, row in enumerate(data["rows"]):
        try:
            rows.append(LayerResult.from_dict(row))
        except (ValueError, TypeError) as error:
            raise ReportFormatError(f"invalid report: rows[{i}]: {error} — {_FIX}") from None
        problems = rows[-1].type_problems()
        if problems:
            shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
            raise ReportFormatError(f"invalid report: rows[{i}]: {shown} — the file was edited or written by another tool; "
                             f"{_FIX}")
    return report_class(rows=rows, provenance=data.get("provenance") or {}, notes=data.get("notes") or [])
