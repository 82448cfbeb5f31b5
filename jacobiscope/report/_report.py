"""`Report`: what `jacobiscope.analyze` returns; the rendering lives in the sibling modules."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._schema import DATAFRAME_COLUMNS, LayerResult
from ._values import _plain, _plain_or_raw, _plural, _same
from ._text import _flatten, _text_table
from . import _html, _json, _plots, _text
from ..errors import ArgumentError, ArgumentIndexError, ArgumentTypeError, ReportFormatError


@dataclass(eq=False, repr=False)
class Report:
    """What ``jacobiscope.analyze`` returns: one `LayerResult` per (input, layer), with provenance and notes.

    Example::

        >>> import math
        >>> from jacobiscope.report import LayerResult, Report
        >>> row = LayerResult(0, "x", 5, "block", None, 1, [2], [1.0, math.inf], [math.nan], [], None, None,
        ...                   None, None, None, None, "diverging", {"growth": math.inf}, ["NaN/Inf at loop 1"], 0.0)
        >>> report = Report([row], {"model": "demo", "versions": {"torch": "2.13.0"}}, ["a note"])
        >>> report
        <Report: 1 row (1 input x 1 layer), 1 flagged, model='demo'>
        >>> Report.from_json(report.to_json()) == report  # NaN and Inf survive JSON
        True

    Attributes:
        rows: the measurements, in the order ``analyze`` made them.
        provenance: model, layers, mode, loops, dtype, device, seed, ``versions``: how to reproduce the numbers.
        notes: things the run changed or decided on the user's behalf (e.g. an attention backend switch).

    Dict rows are turned into `LayerResult` (`LayerResult.from_dict`). ``str(report)`` is `summary`; in
    Jupyter the summary shows as an HTML table.
    """

    rows: list
    provenance: dict | None = None  # a report gathered from `measure` rows may have none
    notes: list | None = None

    __hash__ = None

    def __post_init__(self):
        if isinstance(self.rows, (LayerResult, dict)) or not isinstance(self.rows, (list, tuple)):
            raise TypeError(f"Report.rows must be a list of LayerResult, got {type(self.rows).__name__}")
        rows = []
        for i, row in enumerate(self.rows):
            if isinstance(row, dict):
                row = LayerResult.from_dict(row)
            elif not isinstance(row, LayerResult):
                raise TypeError(f"Report.rows[{i}] is a {type(row).__name__}; expected a LayerResult (or its dict)")
            rows.append(row)
        self.rows = rows
        if self.provenance is None:
            self.provenance = {}
        if not isinstance(self.provenance, dict):
            raise TypeError(f"Report.provenance must be a dict, got {type(self.provenance).__name__}")
        if self.notes is None:
            self.notes = []
        if isinstance(self.notes, str) or not isinstance(self.notes, (list, tuple)):
            raise TypeError(f"Report.notes must be a list of str, got {type(self.notes).__name__}")
        self.notes = list(self.notes)

    # ------------------------------------------------------------------ text

    def summary(self, *, max_label: int = 24) -> str:
        """A terminal table, one line per (input, layer), then the notes and a provenance line.

        Example::

            >>> from jacobiscope.report import Report
            >>> print(Report([], {"model": "demo"}, ["nothing measured"]).summary())
            (no rows)
            Notes:
              - nothing measured
            Provenance: model=demo

        Columns: layer, mode, input (index: label, cut to ``max_label`` characters), the final state norm
        (RMS per token), the largest ``||J||_2`` over the sampled loops, the spectral radius and complex
        (oscillatory) share of the top-k eigenvalues, the largest Lyapunov exponent with its standard error
        (nats per loop), the final effective cluster count, the regime and the flags. "-" means not measured.
        """
        headers, body = self._summary_cells(max_label=max_label)
        lines = [_text_table(headers, body)] if body else ["(no rows)"]
        if body:
            from ._overview import verdict_text

            lines.append("Verdicts:")
            lines.extend(f"  {line}" for line in verdict_text(self).splitlines())
        outcome = self.outcome_summary()
        if outcome:
            lines.append(outcome)
        if self.notes:
            lines.append("Notes:")
            lines.extend(f"  - {note}" for note in self.notes)
        # the call's own arguments and the partial-run bookkeeping are for --resume, not for the reader
        shown = {key: value for key, value in self.provenance.items() if key not in ("arguments", "partial")}
        provenance = ", ".join(f"{key}={value}" for key, value in _flatten(shown))
        lines.append(f"Provenance: {provenance or '-'}")
        if self.partial:
            state = self.provenance["partial"]
            lines.insert(0, f"PARTIAL REPORT: {state.get('finished', len(self.rows))} of {state.get('total', '?')} rows "
                            f"(stopped: {state.get('stopped', 'unknown')}) — continue with --resume (CLI) or "
                            "resume=True (Python)")
        return "\n".join(lines)

    @property
    def partial(self) -> bool:
        """Whether this is the partial report of an interrupted (or still running) `analyze`: its
        ``provenance["partial"]`` says which rows are finished and which remain."""
        return isinstance(self.provenance.get("partial"), dict)

    @property
    def remaining(self) -> list:
        """The ``(input_index, layer)`` rows a partial report still lacks (``[]`` for a complete one)."""
        state = self.provenance.get("partial")
        return [tuple(pair) for pair in state.get("remaining", [])] if isinstance(state, dict) else []

    def outcome_summary(self) -> str:
        """One sentence on what the model made of its inputs, when its rows carry an ``outcome`` ("" otherwise).

        Example::

            >>> from jacobiscope.report import LayerResult, Report
            >>> rows = [LayerResult(i, f"p{i}", 0, "loop", 1.0, 8, [81, 4], [1.0] * 9, [0.1] * 8, [], None, None,
            ...                     None, None, None, None, "converging", {}, [], 0.0, outcome={"solved": i == 0})
            ...         for i in range(2)]
            >>> Report(rows, {}, []).outcome_summary()
            'Outcome at 8 loops: 1 of 2 inputs solved (p0); not solved: p1.'
        """
        return _text.outcome_summary(self)

    def _summary_cells(self, *, max_label: int | None) -> tuple[list[str], list[list[str]]]:
        return _text.summary_cells(self, max_label=max_label)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        inputs = len({row.input_index for row in self.rows})
        layers = len({row.layer for row in self.rows})
        flagged = sum(1 for row in self.rows if row.flags)
        n = len(self.rows)
        text = f"<Report: {_plural(n, 'row')} ({_plural(inputs, 'input')} x {_plural(layers, 'layer')})"
        if flagged:
            text += f", {flagged} flagged"
        if "model" in self.provenance:
            text += f", model={self.provenance['model']!r}"
        return text + ">"

    def _repr_html_(self) -> str:
        return self._html_tables()

    def __eq__(self, other):
        if not isinstance(other, Report):
            return NotImplemented
        return _same(_plain_or_raw(self), _plain_or_raw(other))

    def validate(self) -> "Report":
        """Check every row against the contract; raise ValueError listing all problems, else return self.

        Example::

            >>> from jacobiscope.report import Report
            >>> Report([], {}, []).validate()
            <Report: 0 rows (0 inputs x 0 layers)>
        """
        problems = []
        for i, row in enumerate(self.rows):
            problems += [f"rows[{i}] (layer {row.layer}, input {row.input_index}): {p}" for p in row.validate()]
        for i, note in enumerate(self.notes):
            if not isinstance(note, str):
                problems.append(f"notes[{i}] is a {type(note).__name__}, expected str")
        try:
            _plain(self.provenance, "Report.provenance")
        except TypeError as error:
            problems.append(str(error))
        if problems:
            raise ArgumentError("the report does not match the LayerResult contract:\n  " + "\n  ".join(problems))
        return self

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict:
        """Plain Python values: ``{"provenance", "notes", "rows": [row dicts]}``; NaN and Inf stay floats.

        Example::

            >>> from jacobiscope.report import Report
            >>> Report([], {"seed": 0}, []).to_dict()
            {'provenance': {'seed': 0}, 'notes': [], 'rows': []}
        """
        return {
            "provenance": _plain(self.provenance, "Report.provenance"),
            "notes": _plain(self.notes, "Report.notes"),
            "rows": [row.to_dict() for row in self.rows],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Report":
        """Build a report from `to_dict` output (or parsed JSON, after its non-finite values are restored).

        Example::

            >>> from jacobiscope.report import Report
            >>> Report.from_dict({"provenance": {}, "notes": [], "rows": []})
            <Report: 0 rows (0 inputs x 0 layers)>
        """
        if not isinstance(data, dict) or "rows" not in data:
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ReportFormatError(f"not a jacobiscope report: expected a dict with rows, provenance and notes, got {got}")
        if not isinstance(data["rows"], list):
            raise ReportFormatError(f"not a jacobiscope report: rows must be a list, got {type(data['rows']).__name__}")
        rows = [LayerResult.from_dict(row) for row in data["rows"]]
        return cls(rows=rows, provenance=data.get("provenance") or {}, notes=data.get("notes") or [])

    def to_json(self, path=None) -> str:
        """The report as standard JSON text; written atomically to ``path`` when given.

        Example::

            >>> import json, math
            >>> from jacobiscope.report import Report
            >>> text = Report([], {"tolerance": math.nan, "limit": math.inf}, []).to_json()
            >>> json.loads(text)["provenance"], json.loads(text)["nonfinite"]
            ({'tolerance': None, 'limit': None}, {'/provenance/tolerance': 'nan', '/provenance/limit': 'inf'})

        Strict JSON (RFC 8259) has no NaN or Infinity, and other tools reject Python's ``NaN`` literal, so every
        non-finite float is written as null. The top-level ``"nonfinite"`` object maps the JSON Pointer of each
        one to ``"nan"``, ``"inf"`` or ``"-inf"``, which is how `from_json` restores them exactly. NaN where
        the row schema promises a float (state_norm, step_size, spectral norm values, eigenvalues, energy, the
        oscillation / lyapunov / clusters numbers, seconds) needs no entry: null there already means NaN.
        Lists of numbers are kept on one line.
        """
        return _json.report_to_json(self, path)

    @classmethod
    def from_json(cls, source) -> "Report":
        """Read a report written by `to_json`: a path (str or PathLike) or the JSON text itself.

        Example::

            >>> from jacobiscope.report import Report
            >>> Report.from_json('{"provenance": {"model": "demo"}, "notes": [], "rows": []}')
            <Report: 0 rows (0 inputs x 0 layers), model='demo'>

        A str that starts with ``{`` (after whitespace) is JSON text; anything else is a path. Python's
        ``NaN``/``Infinity`` literals are accepted too.
        """
        return _json.report_from_json(cls, source)

    # ------------------------------------------------------------------ pandas

    def to_dataframe(self):
        """A pandas DataFrame, one row per `LayerResult`: the columns of `DATAFRAME_COLUMNS`, plus every other
        diagnostic's scalars (``<name>.<scalar>``, e.g. ``halting.tokens``) where rows carry its result.

        Example::

            >>> from jacobiscope.report import Report
            >>> Report([], {}, []).to_dataframe().shape  # doctest: +SKIP
            (0, 35)

        Lists (trajectories, eigenvalues, histories) stay in the report: take them from ``report.rows``.
        Not measured is NaN (None in all-empty columns); ``flags`` is the flags joined by ``"; "``.
        """
        try:
            import pandas
        except ImportError:
            raise ImportError("Report.to_dataframe needs pandas, which is not installed: pip install pandas") from None
        scalars = [row.scalars() for row in self.rows]
        columns = list(DATAFRAME_COLUMNS)
        for values in scalars:  # the diagnostics beyond the listed six, where rows carry them, before "solved"
            columns[-4:-4] = [key for key in values if key not in columns]
        return pandas.DataFrame(scalars, columns=columns)

    # ------------------------------------------------------------------ datasets and the dynamics card

    def to_dataset(self):
        """The rows as a `datasets.Dataset`: the `to_dataframe` columns, then the provenance of every row.

        Example::

            >>> from jacobiscope.report import LayerResult, Report
            >>> row = LayerResult(0, "x", 3, "block", None, 2, [4, 8], [1.0, 1.0, 1.0], [0.1, 0.01])
            >>> dataset = Report([row], {"model": "demo", "dtype": "float64"}, []).to_dataset()
            >>> dataset.num_rows, dataset[0]["layer"], dataset[0]["model"], dataset[0]["precision"]
            (1, 3, 'demo', 'float64')

        One row per (input, layer). The provenance columns (`jacobiscope.report._dataset.PROVENANCE_COLUMNS`):
        ``model``, ``model_revision`` (None unless the provenance knows it), ``model_class``, ``adapter``,
        ``precision`` (the compute dtype), ``device``, ``seed``, ``k``, ``transformers_version``,
        ``torch_version``, ``jacobiscope_version``, ``python_version`` and ``report_format_version``, so rows of
        different runs concatenated later still say where they come from.
        """
        from ._dataset import to_dataset

        return to_dataset(self)

    def merge(self, *others, allow=()) -> "Report":
        """One report with the rows of this report and ``others``: the same model and settings, more inputs or
        layers.

        Example::

            >>> from jacobiscope.report import LayerResult, Report
            >>> def run(layer, dtype="float32"):
            ...     row = LayerResult(0, "x", layer, "block", None, 2, [4, 8], [1.0, 1.0, 1.0], [0.1, 0.01])
            ...     return Report([row], {"model": "demo", "dtype": dtype}, [])
            >>> run(3).merge(run(4)).provenance["layers"]
            [3, 4]
            >>> run(3).merge(run(4, "float64"))
            Traceback (most recent call last):
            ...
            jacobiscope.errors.ArgumentError: Report.merge: the reports differ in dtype ('float32' in report 0, 'float64' in report 1), ...

        Refused when the pinned provenance differs (`jacobiscope.report._dataset.PINNED`: model, its revision,
        class and adapter, mode, eta, loops, k, seed, dtype, and the jacobiscope / torch / transformers versions),
        unless ``allow`` names those keys; inputs, layers, diagnostics, timings, the device and the Python version
        may differ (a differing value becomes the list of the values in the merged provenance). An input index
        reused by another report for a different input gets a fresh index; the same (input, layer, mode) in two
        reports is refused. ``Report.merge(a, b, c)`` works too.
        """
        from ._dataset import merge_reports

        return merge_reports([self, *others], allow=allow)

    def to_hub_folder(self, path, *, overwrite: bool = False, license: str = "other", base_model: str | None = None,
                      pretty_name: str | None = None) -> Path:
        """Write a Hub-ready dataset folder, the "dynamics card"; return its path.

        Example::

            >>> report.to_hub_folder("minilm-dynamics", license="cc-by-4.0")  # doctest: +SKIP
            PosixPath('minilm-dynamics')
            >>> # huggingface_hub.upload_folder(repo_id="me/minilm-dynamics", folder_path="minilm-dynamics",
            >>> #                               repo_type="dataset")

        The folder holds ``README.md`` (the dataset card: YAML metadata with ``license``, ``tags``, ``configs`` /
        ``data_files`` and, when the model is named by its Hub id or ``base_model`` is given, ``base_model``; then
        the provenance, the summary and how to load it), ``data/train-00000-of-00001.parquet`` (`to_dataset`) and
        ``report.json`` (the full report, read back by `from_hub_folder`). ``license`` is the data's license
        ("other" unless you choose, e.g. "cc-by-4.0"). Built in a temporary sibling folder and renamed into place:
        an interrupted write leaves no half folder; an existing non-empty folder is replaced only with
        ``overwrite=True`` (and only once the new one is complete).
        """
        from ._card import to_hub_folder

        return to_hub_folder(self, path, overwrite=overwrite, license=license, base_model=base_model,
                             pretty_name=pretty_name)

    @classmethod
    def from_hub_folder(cls, path) -> "Report":
        """Read the report of a dynamics card folder written by `to_hub_folder` (its ``report.json``).

        Example::

            >>> Report.from_hub_folder("minilm-dynamics")  # doctest: +SKIP
            <Report: 6 rows (1 input x 6 layers), model='...'>
        """
        from ._card import from_hub_folder

        return from_hub_folder(cls, path)

    # ------------------------------------------------------------------ figures

    def plot(self, rows=None) -> dict:
        """Matplotlib figures of the report, by name; never opens a window.

        Example::

            >>> from jacobiscope.report import Report
            >>> sorted(Report([], {}, []).plot())  # doctest: +SKIP
            ['eigenvalues', 'lyapunov', 'norms']

        Arguments:
            rows: which rows to draw: None (all), or a list of row indices and/or `LayerResult` objects.

        Returns ``"overview"`` (lambda_max with its interval, ``||J||_2`` and rho(J), one column per row) and the
        figure of every registered diagnostic that draws one, by its figure name: ``eigenvalues``, ``norms`` and
        ``lyapunov`` always (a figure says when it has no data); ``energy``, ``clusters``, ``fixed_points``,
        ``halting``, ``loop_depth`` and a user's diagnostic when a row carries its result:

        - eigenvalues: the top-k Jacobian eigenvalues in the complex plane with the unit circle.
        - norms: ``||J||_2`` at the sampled loops, the state norm and the relative step size, against the loop.
        - lyapunov: the running estimate of every exponent against the loop, one panel per row.
        - energy: pseudo-energy against the loop; clusters: the top eigenvalue and the (effective) cluster count.
        - fixed_points: the share of perturbed starts in each basin; halting: token convergence and the exit rules'
          loops saved against agreement; loop_depth: output quality and KL divergence against the loop.

        Figures are `matplotlib.figure.Figure` objects on the Agg canvas, made without pyplot: the global
        backend is not touched, nothing pops up, and they are freed with their last reference. Save one with
        ``fig.savefig("norms.png")``.
        """
        return _plots.plot_report(self, rows)

    def save_figure(self, kind: str, path, *, format: str | None = None, rows=None, dpi: float = 150) -> Path:
        """Draw one figure (``kind`` as for `display`) and save it to ``path``; return the path.

        Example::

            >>> report.save_figure("norms", "figures/norms.svg")  # doctest: +SKIP
            PosixPath('figures/norms.svg')

        The format is ``format`` (png, svg or pdf) or else the file suffix: SVG and PDF are vector files for papers
        (text kept as text, TrueType fonts, no date), PNG is drawn at ``dpi``. Written atomically.
        """
        from .._figures import figure_format, save_figure

        figure_format(path, format)  # a bad suffix or format fails before anything is drawn
        return save_figure(self.display(kind, rows).plot(), path, format=format, dpi=dpi)

    def save_figures(self, folder, *, format: str = "png", rows=None, dpi: float = 150) -> dict:
        """Save every `plot` figure into ``folder`` as ``<name>.<format>``; return ``{name: path}``.

        Example::

            >>> sorted(report.save_figures("figures", format="pdf"))  # doctest: +SKIP
            ['eigenvalues', 'lyapunov', 'norms', 'overview']

        ``format``: png (raster, at ``dpi``), svg or pdf (vector). Each file is written atomically.
        """
        from .._figures import figure_format, save_figure

        chosen = figure_format(format=format)
        folder = Path(folder)
        return {name: save_figure(figure, folder / f"{name}.{chosen}", format=chosen, dpi=dpi)
                for name, figure in self.plot(rows).items()}

    def display(self, kind: str, rows=None):
        """One figure as a scikit-learn-style display: ``report.display("norms").plot(ax=my_axes)``.

        ``kind`` is ``overview`` or any registered diagnostic's figure (by its figure name or its own name:
        ``norms`` / ``spectral_norm``, ``eigenvalues``, ``lyapunov``, ``energy``, ``clusters``, a user's own; see
        `ReportDisplay`).
        """
        from ._plots import ReportDisplay

        return ReportDisplay.from_report(self, kind, rows)

    def _select(self, rows) -> list:
        if rows is None:
            return list(self.rows)
        if isinstance(rows, (int, LayerResult)):
            rows = [rows]
        selected = []
        for item in rows:
            if isinstance(item, LayerResult):
                selected.append(item)
            elif isinstance(item, int) and not isinstance(item, bool):
                if not -len(self.rows) <= item < len(self.rows):
                    raise ArgumentIndexError(f"row index {item} is out of range: the report has {len(self.rows)} rows")
                selected.append(self.rows[item])
            else:
                raise ArgumentTypeError(f"rows must hold row indices or LayerResult objects, got {type(item).__name__}")
        return selected

    # ------------------------------------------------------------------ HTML

    def save_html(self, path, *, figures: bool = True, dpi: int = 100, figure_format: str = "png") -> Path:
        """Write one self-contained HTML file (tables and figures inline, no external resources); return its path.

        Example::

            >>> import pathlib, tempfile
            >>> from jacobiscope.report import Report
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     path = Report([], {"model": "demo"}, []).save_html(pathlib.Path(folder) / "r.html", figures=False)
            ...     "<title>jacobiscope report: demo</title>" in path.read_text()
            True

        The file holds the provenance table, the notes, the summary table (full input labels), each row's
        flags and evidence, and every `plot` figure as an inline base64 PNG at ``dpi``. All text is
        HTML-escaped. ``figures=False`` writes the tables only and does not need matplotlib. ``figure_format="svg"``
        inlines the figures as vector SVG instead (sharp at any zoom, larger file). The page reflows down to
        800 px wide and less: wide tables scroll inside their own box. Written atomically.
        """
        return _html.save_html(self, path, figures=figures, dpi=dpi, figure_format=figure_format)

    def _html_tables(self) -> str:
        return _html.html_tables(self)
