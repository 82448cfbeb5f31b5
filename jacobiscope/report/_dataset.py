"""The report as a `datasets.Dataset` (one row per measured layer and input, pinned to its provenance), and the
merge of reports of the same model and settings.

Example::

    >>> from jacobiscope.report import LayerResult, Report
    >>> def row(layer):
    ...     return LayerResult(0, "x", layer, "block", None, 2, [4, 8], [1.0, 1.0, 1.0], [0.1, 0.01])
    >>> provenance = {"model": "demo", "dtype": "float32", "versions": {"torch": "2.13.0"}}
    >>> merged = Report([row(3)], provenance, []).merge(Report([row(4)], provenance, []))
    >>> dataset = merged.to_dataset()
    >>> dataset["layer"][:], dataset["model"][:], dataset["torch_version"][:]
    ([3, 4], ['demo', 'demo'], ['2.13.0', '2.13.0'])
"""
from __future__ import annotations

import logging
import math

from ._schema import FORMAT_VERSION, LayerResult
from ..errors import ArgumentError, ArgumentTypeError

logger = logging.getLogger(__name__)

__all__ = ["PROVENANCE_COLUMNS", "PINNED", "to_dataset", "merge_reports", "provenance_columns"]

#: The provenance columns every row of `Report.to_dataset` carries: ``column: where it comes from`` (a provenance
#: key, ``versions.<package>``, or, for ``report_format_version``, the format this jacobiscope writes).
PROVENANCE_COLUMNS = {
    "model": "model", "model_revision": "model_revision", "model_class": "model_class", "adapter": "adapter",
    "precision": "dtype", "device": "device", "seed": "seed", "k": "k",
    "transformers_version": "versions.transformers", "torch_version": "versions.torch",
    "jacobiscope_version": "versions.jacobiscope", "python_version": "versions.python",
    "report_format_version": None,
}

#: Provenance that two reports must share to be merged: what changes the numbers of the same (input, layer).
#: Inputs, layers, diagnostics, timings, the device and the Python version may differ.
PINNED = ("model", "model_revision", "model_class", "adapter", "mode", "eta", "loops", "k", "seed", "dtype",
          "versions.jacobiscope", "versions.torch", "versions.transformers")

# Older spellings of the model revision that a report's provenance may carry (the first one present is used).
_REVISION_KEYS = ("model_revision", "revision", "commit_hash", "_commit_hash")


def _lookup(provenance: dict, key: str):
    if key == "model_revision":
        return next((provenance[name] for name in _REVISION_KEYS if provenance.get(name) is not None), None)
    value = provenance
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def provenance_columns(provenance: dict) -> dict:
    """The provenance columns of `PROVENANCE_COLUMNS` for one report (None where the report does not know).

    Example::

        >>> from jacobiscope.report._dataset import provenance_columns
        >>> columns = provenance_columns({"model": "m", "dtype": "float64", "versions": {"torch": "2.13.0"}})
        >>> columns["model"], columns["precision"], columns["torch_version"], columns["model_revision"]
        ('m', 'float64', '2.13.0', None)
    """
    columns = {}
    for column, key in PROVENANCE_COLUMNS.items():
        value = FORMAT_VERSION if key is None else _lookup(provenance, key)
        # A merged report lists the differing values of an allowed key: one cell, the values joined.
        columns[column] = ", ".join(map(str, value)) if isinstance(value, list) else value
    return columns


def to_dataset(report):
    """The report's rows as a `datasets.Dataset`: the DataFrame columns, then the provenance columns."""
    try:
        import datasets
    except ImportError:
        raise ImportError("Report.to_dataset needs the datasets package, which is not installed: pip install "
                          "datasets") from None
    columns = list(report.to_dataframe().columns)
    provenance = provenance_columns(report.provenance)
    # From the rows' own scalars, not the DataFrame: a NaN measurement stays NaN and "not measured" stays None
    # (pandas would make both NaN, and Arrow both null).
    records = [{**{column: scalars.get(column) for column in columns}, **provenance}
               for scalars in (row.scalars() for row in report.rows)]
    if not records:
        return datasets.Dataset.from_dict({column: [] for column in [*columns, *provenance]})
    return datasets.Dataset.from_list(records)


def _same_value(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _check_pinned(reports, allow) -> None:
    """Refuse reports whose pinned provenance differs, naming the key, the values and the fix."""
    unknown = set(allow) - set(PINNED)
    if unknown:
        raise ArgumentError(f"Report.merge: allow names {sorted(unknown)}, which are not pinned — choose from "
                         f"{', '.join(PINNED)}")
    for key in PINNED:
        if key in allow:
            continue
        first = _lookup(reports[0].provenance, key)
        for index, other in enumerate(reports[1:], start=1):
            value = _lookup(other.provenance, key)
            if not _same_value(first, value):
                raise ArgumentError(f"Report.merge: the reports differ in {key} ({first!r} in report 0, {value!r} in "
                                 f"report {index}), so their numbers do not compare — analyze again with the same "
                                 f"{key}, or pass allow=({key!r},) to merge them anyway")


def _merged_provenance(reports, rows) -> dict:
    """The first report's provenance; keys that differ become the list of their distinct values; layers, inputs,
    diagnostics and seconds are recomputed over all the reports."""
    provenance = dict(reports[0].provenance)
    for key in {key for report in reports for key in report.provenance}:
        values = []
        for report in reports:
            value = report.provenance.get(key)
            if not any(_same_value(value, seen) for seen in values):
                values.append(value)
        if len(values) > 1:
            provenance[key] = values
    if isinstance(provenance.get("arguments"), list):
        del provenance["arguments"]  # each report's own call: a merged report has no single call to resume
    provenance["layers"] = sorted({row.layer for row in rows})
    provenance["inputs"] = len({row.input_index for row in rows})
    diagnostics = [name for report in reports for name in report.provenance.get("diagnostics") or []]
    if diagnostics:
        provenance["diagnostics"] = list(dict.fromkeys(diagnostics))
    seconds = [report.provenance.get("seconds") for report in reports]
    if all(isinstance(value, (int, float)) for value in seconds):
        provenance["seconds"] = float(sum(seconds))
    provenance["merged_from"] = len(reports)
    return provenance


def _renumbered_rows(reports) -> list:
    """All rows; an input index another report already used for a different input label gets a fresh index, and
    the same (input, layer, mode) measured twice is refused."""
    rows, labels, seen = [], {}, {}
    for number, report in enumerate(reports):
        mapping = {}
        for row in report.rows:
            if row.input_index not in mapping:
                index = row.input_index
                if labels.get(index, row.input_label) != row.input_label:
                    index = max(max(labels), *(mapping.values() or [0])) + 1
                mapping[row.input_index] = index
                labels.setdefault(index, row.input_label)
            key = (mapping[row.input_index], row.layer, row.mode)
            if key in seen:
                raise ArgumentError(f"Report.merge: input {row.input_label!r} layer {row.layer} ({row.mode}) is in "
                                 f"report {seen[key]} and report {number} — drop it from one of them (e.g. "
                                 "Report([r for r in report.rows if r.layer != ...], ...)) before merging")
            seen[key] = number
            rows.append(row if mapping[row.input_index] == row.input_index else
                        LayerResult.from_dict({**row.to_dict(), "input_index": mapping[row.input_index]}))
    return rows


def merge_reports(reports, allow=()):
    """One report with the rows of ``reports`` (same model and settings: see `PINNED`)."""
    from ._report import Report

    for index, report in enumerate(reports):
        if not isinstance(report, Report):
            raise ArgumentTypeError(f"Report.merge: argument {index} is a {type(report).__name__}, not a Report — pass "
                            "reports (Report.from_json(path) reads a saved one)")
    for index, report in enumerate(reports):
        if report.partial:  # its missing rows would silently vanish from the merged card
            raise ArgumentError(f"Report.merge: argument {index} is a partial report ({len(report.rows)} rows, "
                             f"{len(report.remaining)} remaining) — finish it first (analyze(..., resume=True) or "
                             "jacobiscope analyze ... --resume)")
    if isinstance(allow, str):
        allow = (allow,)
    _check_pinned(reports, tuple(allow))
    rows = _renumbered_rows(reports)
    notes = list(dict.fromkeys(note for report in reports for note in report.notes))
    merged = Report(rows, _merged_provenance(reports, rows), notes)
    logger.info("merged %d reports into %d rows", len(reports), len(rows))
    return merged
