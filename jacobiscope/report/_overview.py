"""What a person reads first: each row's verdict in plain words with its key numbers, and a glossary of columns."""
from __future__ import annotations

import math

from ..diagnostics._lyapunov import lambda_interval
from ._text import _num, _outcome_cell, _single_line

# One phrase per verdict (`jacobiscope.dynamics.Regime`), completed by the row's numbers.
_PLAIN_WORDS = {
    "converging": "settles to a fixed point",
    "periodic": "settles on a period-{period} orbit",
    "critical": "sits at the edge of stability (lambda_max = 0 within the tolerance)",
    "oscillating": "turns quasi-periodically (lambda_max = 0, the orbit rotates)",
    "chaotic": "is chaotic: nearby states separate",
    "diverging": "blows up",
    "undetermined": "is not decided yet{needed}",
    "unknown": "was not classified",
}


# The same verdicts read on the normalized state of a growing residual (`judged_on == "normalized state"`).
_NORMALIZED_WORDS = {
    "converging": "converges (the direction settles)",
    "undetermined": "still moves slowly: settling is not decided yet{needed}",
}


#: The summary table's own columns: (unit, what a value means). Each diagnostic's columns are explained by its
#: result type's ``glossary`` (or, failing that, the first line of the diagnostic's docstring).
GLOSSARY = {
    "layer": ("index", "which block of the model is looped (0 for a model's own loop)."),
    "mode": ("-", "block: the whole block is the map; attention: its attention sub-map; loop: the model's own "
                  "recurrence."),
    "input": ("-", "which input the row measured (index: label)."),
    "state norm": ("RMS per token", "size of the state X_T after the last loop."),
    "outcome": ("-", "what the model made of this input at this loop count (Sudoku solvers: solved or not)."),
    "flags": ("-", "problems met on this row (NaN/Inf, inaccurate eigenvalues, ...)."),
}


def plain_verdict(row) -> str:
    """``"settles to a fixed point"``-style words for the row's verdict."""
    evidence = row.evidence if isinstance(row.evidence, dict) else {}
    needed = evidence.get("loops_needed")
    words = _NORMALIZED_WORDS.get(row.regime) if evidence.get("judged_on") == "normalized state" else None
    words = words or _PLAIN_WORDS.get(row.regime, row.regime)
    text = words.format(period=evidence.get("period", "?"),
                        needed=f": run about {needed} loops" if isinstance(needed, int) and needed else "")
    if evidence.get("judged_on") == "normalized state":
        return f"{_growth_words(evidence)}; the normalized state (what the next norm sees) {text}"
    return text


def _growth_words(evidence: dict) -> str:
    """What grows: ``"the residual norm grows ~linearly (0.5 -> 31)"``."""
    exponent = evidence.get("residual_growth_exponent")
    shape = ("~linearly" if isinstance(exponent, (int, float)) and abs(exponent - 1) <= 0.25 else
             f"like t^{_num(exponent, '.2g')}" if isinstance(exponent, (int, float)) else "")
    first, last = evidence.get("residual_norm_first"), evidence.get("residual_norm_last")
    span = f" ({_num(first)} -> {_num(last)})" if isinstance(first, (int, float)) and isinstance(last, (int, float)) else ""
    return f"the residual norm grows {shape}{span}".replace("grows  ", "grows ").replace("grows (", "grows (")


def key_numbers(row) -> str:
    """The numbers a reader checks first: lambda_max (late estimate and interval: the one definition), the
    normalized state's ||J|| when the verdict read it, rho(J), max ||J||."""
    evidence = row.evidence if isinstance(row.evidence, dict) else {}
    scalars = row.scalars()
    parts = []
    interval = lambda_interval(row)  # the one lambda_max: the table's and the figures' number
    if interval is not None:
        late, width, first, last = interval
        text = f"lambda_max = {_num(late)}"  # NaN too: a trajectory that blew up says so
        if isinstance(width, (int, float)) and math.isfinite(width) and math.isfinite(late):
            text += f" +/- {_num(width, '.2g')}"
        parts.append(text + (f" (loops {first}-{last})" if first is not None else ""))
    if evidence.get("judged_on") == "normalized state" and isinstance(evidence.get("spectral_norm"), (int, float)):
        parts.append(f"normalized ||J||2 = {_num(evidence['spectral_norm'], '.3g')} at the last loop")
    if scalars.get("spectral_radius") is not None:
        parts.append(f"rho(J) = {_num(scalars['spectral_radius'], '.3g')}")
    if scalars.get("max_spectral_norm") is not None:
        parts.append(f"max ||J||2 = {_num(scalars['max_spectral_norm'], '.3g')}")
    return ", ".join(parts)


def verdict_lines(report, *, max_label: int = 48) -> list[dict]:
    """One entry per row: ``{"who", "label", "words", "numbers", "outcome", "reason", "regime", "flags"}``."""
    from .._figures import row_names

    lines = []
    # the same names as the figures' legends, so a verdict line and its curve are found by one name
    for row, who in zip(report.rows, row_names(report.rows, max_label=max_label)):
        label = _single_line(str(row.input_label))
        outcome = _outcome_cell(row.outcome)
        lines.append({
            "who": who, "label": label, "regime": row.regime, "words": plain_verdict(row) + _depth_words(row),
            "numbers": key_numbers(row), "outcome": "" if outcome == "-" else f"{outcome} at T={row.loops}",
            "reason": str(row.evidence.get("reason", "")) if isinstance(row.evidence, dict) else "",
            "flags": list(row.flags)})
    return lines


def _depth_words(row) -> str:
    """``"; past its trained depth (16) the loop is settling: ..."`` when the row carries a depth_safety result."""
    from ..diagnostics import get_diagnostic

    result = get_diagnostic("depth_safety").from_row(row) if "depth_safety" in row.results else None
    return f"; {result.sentence()}" if hasattr(result, "sentence") else ""


def verdict_text(report) -> str:
    """The verdict lines as plain text (what `Report.summary` prints under the table)."""
    out = []
    for line in verdict_lines(report):
        text = f"{line['who']}: {line['words']}"
        if line["numbers"]:
            text += f" ({line['numbers']})"
        if line["outcome"]:
            text += f"; {line['outcome']}"
        out.append(text)
    return "\n".join(out)


def glossary_rows(headers, owners: dict | None = None) -> list[tuple[str, str, str]]:
    """(column, unit, meaning) for the columns of a summary table; ``owners`` maps a diagnostic's column header to
    the diagnostic (its ``glossary()``, else its docstring's first line, explains it)."""
    rows = []
    for header in headers:
        if header in GLOSSARY:
            rows.append((header, *GLOSSARY[header]))
            continue
        owner = (owners or {}).get(header)
        entry = owner.glossary().get(header) if owner is not None else None
        if entry is not None:
            rows.append((header, *entry))
            continue
        meaning = (type(owner).__doc__ or "").strip().split("\n")[0] if owner is not None else ""
        rows.append((header, "-", meaning or "a registered diagnostic's column."))
    return rows
