"""`Report`: what `jacobiscope.analyze` measured, as a terminal table, JSON, a DataFrame, figures or one HTML file.

Example::

    >>> from jacobiscope.report import LayerResult, Report
    >>> row = LayerResult(input_index=0, input_label="pixel_values[0]", layer=3, mode="block", eta=None, loops=2,
    ...     state_shape=[4, 8], state_norm=[1.0, 1.0, 1.0], step_size=[0.1, 0.01], results={
    ...         "spectral_norm": {"samples": [{"loop": 2, "value": 0.9, "tolerance": 1e-6}]},
    ...         "regime": {"regime": "converging", "evidence": {}}}, seconds=0.1)
    >>> report = Report(rows=[row], provenance={"model": "demo"}, notes=[])
    >>> Report.from_json(report.to_json()) == report
    True
    >>> print(report.summary())
    layer  mode   input               state norm  max ||J||2  rho(J)  ...  regime      flags
    ...
        3  block  0: pixel_values[0]           1         0.9       -  ...  converging  -
    ...

A row holds every diagnostic's typed result in ``row.results`` (`jacobiscope.diagnostics.DiagnosticResult`);
the summary, DataFrame, JSON (format 2; format 1 files still load, see `upgrade`), HTML, figures (PNG, or vector
SVG / PDF: `Report.save_figure`) and the dynamics card (`Report.to_dataset`, `Report.merge`,
`Report.to_hub_folder`) are generated from them. Every stored value is plain Python, so a report survives `to_json` / `from_json` exactly (NaN and Inf
included, see `Report.to_json`). Plotting needs matplotlib, `to_dataframe` pandas and `to_dataset` datasets;
each is imported only when called.
"""
from __future__ import annotations

from ._json import ReportFormatError, ReportSourceError, upgrade
from ._plots import ReportDisplay
from ._report import Report
from ._schema import (  # noqa: F401 - the schema constants are public too
    CLUSTER_KEYS, DATAFRAME_COLUMNS, FORMAT, FORMAT_VERSION, LYAPUNOV_KEYS, MODES, OSCILLATION_KEYS, REGIMES,
    LayerResult,
)

__all__ = ["LayerResult", "Report", "ReportDisplay", "ReportFormatError", "ReportSourceError", "MODES", "REGIMES",
           "DATAFRAME_COLUMNS", "FORMAT_VERSION", "upgrade"]
