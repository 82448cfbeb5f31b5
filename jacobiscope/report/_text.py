"""The text summary: table cells, number formatting, the outcome sentence."""
from __future__ import annotations

import math

from .._values import _is_number, _num, _plural, _shorten, _single_line  # noqa: F401 - re-exported
from ..diagnostics._regime import LAMBDA_HEADER


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
    """Aligned columns: a column of numbers (and "-", "nan", "45%", "0.1 +/- 0.02") right-aligned, text left; the
    last column (flags) is not padded."""
    columns = len(headers)
    widths = [max([len(headers[c])] + [len(r[c]) for r in body]) for c in range(columns)]
    right = [all(_numeric_cell(r[c]) for r in body) for c in range(columns)]

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


def _numeric_cell(cell: str) -> bool:
    """A number as the table writes one: ``1.5``, ``-``, ``nan``, ``inf``, ``45%``, ``0.1 +/- 0.02``."""
    for part in cell.split(" +/- "):
        part = part.strip().rstrip("%")
        if part in ("-", "nan", "inf", "-inf"):
            continue
        try:
            float(part)
        except ValueError:
            return False
    return True


def table_columns(rows) -> list[tuple]:
    """``(diagnostic, header)`` of every summary column: the listed diagnostics' always (every report has the same
    columns), then each other diagnostic's where a row carries its result, in registry order."""
    from ..diagnostics._base import _REGISTRY, list_diagnostics
    from ..diagnostics._row import _listed_first

    list_diagnostics()
    columns = []
    for diagnostic in _listed_first(_REGISTRY):
        columns += [(diagnostic, header) for header in diagnostic.table_headers()]
        for row in rows:
            result = row.results.get(diagnostic.name)
            if result is not None:
                for header in _diagnostic_columns(diagnostic, result):
                    if (diagnostic, header) not in columns:
                        columns.append((diagnostic, header))
    return columns


def _diagnostic_columns(diagnostic, result) -> dict:
    """A registered diagnostic's own columns for ``result`` (what its code raises is said in the cell)."""
    try:
        return dict(diagnostic.columns(diagnostic.typed(result)))
    except Exception as error:  # noqa: BLE001 - a user's column code must not break the report, but says so
        return {diagnostic.name: f"? ({type(error).__name__} in {type(diagnostic).__name__}.columns)"}


def _cell(value) -> str:
    if value is None:
        return "-"
    return _num(value, ".4g") if _is_number(value) else _single_line(str(value))


def _outcome_cell(outcome) -> str:
    if not isinstance(outcome, dict):
        return "-"
    if "solved" in outcome:
        return "solved" if outcome["solved"] else "not solved"
    return ", ".join(f"{key}={_display(value)}" for key, value in outcome.items()) or "-"


def summary_cells(report, *, max_label: int | None) -> tuple[list[str], list[list[str]]]:
    """The summary table: the row's identity and state norm, then each diagnostic's own cells (`table_columns`),
    outcome, flags."""
    columns = table_columns(report.rows)
    with_outcome = any(row.outcome is not None for row in report.rows)
    headers = ["layer", "mode", "input", "state norm"] + [header for _, header in columns]
    headers += (["outcome"] if with_outcome else []) + ["flags"]
    body = []
    for row in report.rows:
        label = _single_line(str(row.input_label))
        if max_label is not None:
            label = _shorten(label, max_label)
        final_norm = row.state_norm[-1] if isinstance(row.state_norm, list) and row.state_norm else None
        cells = [str(row.layer), str(row.mode), f"{row.input_index}: {label}", _num(final_norm, ".4g")]
        computed = {}
        for diagnostic, header in columns:
            if diagnostic.name not in computed:
                result = row.results.get(diagnostic.name)
                computed[diagnostic.name] = {} if result is None else _diagnostic_columns(diagnostic, result)
            value = computed[diagnostic.name].get(header)
            if header == LAMBDA_HEADER and diagnostic.name == "regime":
                value = _lambda_cell(row)  # the figures' number, from the same function (old reports included)
            cells.append(_cell(value))
        if with_outcome:
            cells.append(_outcome_cell(row.outcome))
        cells.append("; ".join(_single_line(str(flag)) for flag in row.flags) or "-")
        body.append(cells)
    return headers, body


def _lambda_cell(row) -> str | None:
    """The one lambda_max of a row as the table writes it (``"-0.03 +/- 0.01"``), by `lambda_interval`."""
    from ..diagnostics._lyapunov import lambda_interval

    interval = lambda_interval(row)
    if interval is None:
        return None
    late, width = interval[0], interval[1]
    exact = isinstance(late, (int, float)) and math.isinf(late)  # -inf: an annihilated tangent, no interval
    return _num(late) if exact or width is None or not math.isfinite(width) else (
        f"{_num(late)} +/- {_num(width, '.2g')}")


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
