"""The text summary: table cells, number formatting, the outcome sentence."""
from __future__ import annotations

import math

from ._values import _is_number, _plural


def _num(value, spec: str = ".3g") -> str:
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


def _flatten(mapping: dict, prefix: str = ""):
    """``(dotted key, display string)`` pairs of a nested dict (``versions.torch``)."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _flatten(value, name + ".")
        elif isinstance(value, (list, tuple)):
            yield name, "[" + ", ".join(_display(item) for item in value) + "]"
        else:
            yield name, _display(value)


def _display(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return _num(value, ".6g")
    return str(value)


def _text_table(headers: list, body: list) -> str:
    """Aligned columns, numbers right-aligned; the last column (flags) is not padded."""
    columns = len(headers)
    widths = [max([len(headers[c])] + [len(r[c]) for r in body]) for c in range(columns)]
    right = [c not in (1, 2, 9, 10) for c in range(columns)]  # mode, input, regime, flags are text

    def line(cells):
        out = []
        for c, cell in enumerate(cells):
            if c == columns - 1:
                out.append(cell)
            elif right[c]:
                out.append(cell.rjust(widths[c]))
            else:
                out.append(cell.ljust(widths[c]))
        return "  ".join(out).rstrip()

    header = "  ".join(h.ljust(widths[c]) if c < columns - 1 else h for c, h in enumerate(headers))
    rule = "  ".join("-" * widths[c] for c in range(columns))
    return "\n".join([header, rule, *(line(r) for r in body)])


def _extra_columns(rows) -> list[tuple[str, str]]:
    """(diagnostic, header) of every summary column that the rows' extra diagnostics provide, in first-seen order."""
    columns = []
    for row in rows:
        for name, result in (row.extra or {}).items():
            for header in _diagnostic_columns(name, result):
                if (name, header) not in columns:
                    columns.append((name, header))
    return columns


def _diagnostic_columns(name: str, result) -> dict:
    """A registered diagnostic's own columns for ``result``; a scalar result is its own column; else none."""
    from ..diagnostics._base import _REGISTRY

    diagnostic = _REGISTRY.get(name)
    if diagnostic is not None:
        try:
            typed = diagnostic.result_type.from_dict(result) if diagnostic.result_type is not None else result
            return dict(diagnostic.columns(typed))
        except Exception as error:  # noqa: BLE001 - a user's column code must not break the report, but says so
            return {name: f"? ({type(error).__name__} in {type(diagnostic).__name__}.columns)"}
    return {name: result} if _is_number(result) or isinstance(result, str) else {}


def _extra_cells(row, columns) -> list[str]:
    cells = []
    for name, header in columns:
        result = (row.extra or {}).get(name)
        value = _diagnostic_columns(name, result).get(header) if result is not None else None
        cells.append("-" if value is None else _num(value, ".4g") if _is_number(value) else _single_line(str(value)))
    return cells


def _outcome_cell(outcome) -> str:
    if not isinstance(outcome, dict):
        return "-"
    if "solved" in outcome:
        return "solved" if outcome["solved"] else "not solved"
    return ", ".join(f"{key}={_display(value)}" for key, value in outcome.items()) or "-"


def summary_cells(report, *, max_label: int | None) -> tuple[list[str], list[list[str]]]:
    """The summary table: the row's identity and state norm, then each diagnostic's own cells in registry order (the
    built-ins always, so every report has the same columns; others when a row carries them), outcome, flags."""
    from ..diagnostics._base import _REGISTRY, list_diagnostics

    list_diagnostics()  # the built-ins register on first use
    tabled = [d for d in _REGISTRY.values() if getattr(d, "headers", None) and callable(getattr(d, "cells", None))]
    headers = ["layer", "mode", "input", "state norm"] + [h for d in tabled for h in d.headers]
    with_outcome = any(row.outcome is not None for row in report.rows)
    extra_columns = _extra_columns(report.rows)
    headers += [header for _, header in extra_columns] + (["outcome"] if with_outcome else []) + ["flags"]
    body = []
    for row in report.rows:
        scalars = row.scalars()
        label = _single_line(str(row.input_label))
        if max_label is not None:
            label = _shorten(label, max_label)
        cells = [str(row.layer), str(row.mode), f"{row.input_index}: {label}", _num(scalars["final_state_norm"], ".4g")]
        for diagnostic in tabled:
            cells += diagnostic.cells(scalars)
        cells += _extra_cells(row, extra_columns)
        if with_outcome:
            cells.append(_outcome_cell(row.outcome))
        cells.append("; ".join(_single_line(str(flag)) for flag in row.flags) or "-")
        body.append(cells)
    return headers, body


def outcome_summary(report) -> str:
    judged = [row for row in report.rows if isinstance(row.outcome, dict) and "solved" in row.outcome]
    if not judged:
        return ""
    solved = [row for row in judged if row.outcome["solved"]]
    unsolved = [row for row in judged if not row.outcome["solved"]]
    loops = sorted({row.loops for row in judged})
    at = f"{loops[0]} loops" if len(loops) == 1 else "loops " + ", ".join(map(str, loops))
    text = f"Outcome at {at}: {len(solved)} of {_plural(len(judged), 'input')} solved"
    if solved:
        text += " (" + ", ".join(str(row.input_label) for row in solved) + ")"
    if unsolved:
        text += "; not solved: " + ", ".join(str(row.input_label) for row in unsolved)
    return text + "."
