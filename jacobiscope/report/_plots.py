"""The report's figures: the overview (several diagnostics side by side) drawn here, every other figure drawn by
its diagnostic (its result type's ``draw``); `ReportDisplay` draws any of them scikit-learn style."""
from __future__ import annotations

import math

from .._figures import labels_and_colors as _labels_and_colors
from .._figures import matplotlib_classes as _matplotlib
from .._figures import new_figure as _new_figure
from .._figures import short as _short
from ..diagnostics._lyapunov import lambda_interval as _lambda_interval
from ..errors import ArgumentError

def _plot_overview(new_figure, rows, labels, colors):
    figure = new_figure(max(7.0, min(16.0, 2.0 + 0.45 * len(rows))), 6.4)
    _draw_overview(figure.subplots(2, 1, sharex=True), rows, labels, colors)
    return figure


def _draw_overview(axes, rows, labels, colors):
    """One column per row on a shared axis: lambda_max (late estimate with its 95% interval) above, ||J|| and
    rho(J) below, so layers and inputs compare at a glance."""
    from ..dynamics.regime import RegimeThresholds

    ax_lambda, ax_norm = axes
    tol = RegimeThresholds().tol
    ax_lambda.axhspan(-tol, tol, color="#f3e6c4", zorder=0, label=f"critical band $\\pm${tol:g}")
    ax_lambda.axhline(0.0, color="0.5", ls=":", lw=1)
    ax_norm.axhline(1.0, color="0.5", ls=":", lw=1)
    positions = list(range(len(rows)))
    plotted, normalized = [], False
    for x, row, color in zip(positions, rows, colors):
        interval = _lambda_interval(row)
        if interval is not None:
            late, width, _, _ = interval
            ax_lambda.errorbar([x], [late], yerr=[[width if math.isfinite(width) else 0.0]] * 2, fmt="o", ms=5,
                               color=color, capsize=3)
        plotted += _draw_norms(ax_norm, x, row, color)
        normalized |= _judged_normalized(row)
    ax_norm.plot([], [], "o", color="0.3", label="max $\\|J\\|_2$ over sampled loops")
    ax_norm.plot([], [], "x", color="0.3", mew=2, label="$\\rho(J)$ at the last loop")
    if normalized:
        ax_norm.plot([], [], "P", color="0.3", label="$\\|J\\|_2$ of the normalized state, last loop")
    ax_lambda.set_ylabel("$\\lambda_{max}$ (nats/loop)")
    ax_lambda.set_title("lambda_max: late-half estimate and 95% interval (of the normalized state where judged so)")
    ax_norm.set_ylabel("norm / radius of J")
    ax_norm.set_title("Jacobian J = dF/dX: spectral norm and spectral radius")
    step = max(1, math.ceil(len(rows) / 40))
    ax_norm.set_xticks(positions[::step], [_short(label) for label in labels][::step], rotation=35, ha="right",
                       fontsize="small" if len(rows) <= 20 else "x-small")
    _norm_scale(ax_norm, plotted)
    ax_lambda.legend(fontsize="small", loc="best")
    ax_norm.legend(fontsize="small", loc="best")


_NORM_CEILING = 1e12


def _judged_normalized(row) -> bool:
    return isinstance(row.evidence, dict) and row.evidence.get("judged_on") == "normalized state"


def _draw_norms(ax, x, row, color) -> list:
    """A row's ||J||, rho(J) (and the normalized state's ||J||) markers; returns the values drawn."""
    scalars = row.scalars()
    drawn = []
    for value, marker, extra in ((scalars.get("max_spectral_norm"), "o", {"ms": 6}),
                                 (scalars.get("spectral_radius"), "x", {"ms": 7, "mew": 2}),
                                 (row.evidence.get("spectral_norm") if _judged_normalized(row) else None, "P",
                                  {"ms": 7})):
        if isinstance(value, (int, float)) and math.isfinite(value):
            # beyond _NORM_CEILING (an overflowing row) the marker sits at the ceiling as a triangle: an axis
            # spanning 280 decades has no ticks to draw and no room for the other rows
            clipped = min(float(value), _NORM_CEILING)
            ax.plot([x], [clipped], "^" if clipped < value else marker, color=color, **extra)
            drawn.append(clipped)
    return drawn


def _norm_scale(ax, values: list) -> None:
    """A log axis when the values span more than a factor of 10 (a first-loop ||J|| of 274 next to 1.4 would
    flatten every other marker on a linear one), else linear from 0."""
    positive = [value for value in values if value > 0]
    if positive and max(positive) > 10 * min(positive):
        ax.set_yscale("log")
        ax.set_ylabel("norm / radius of J (log scale)")
    else:
        ax.set_ylim(bottom=0)


def _figure_diagnostics():
    """``{figure name: diagnostic}`` of every registered diagnostic that can draw, in registry order."""
    from ..diagnostics._base import _REGISTRY, list_diagnostics

    list_diagnostics()
    return {(d.figure_name or d.name): d for d in _REGISTRY.values()}


def _carrying(diagnostic, rows, labels):
    """The rows (and labels) a diagnostic's figure draws: all for one drawn always, else those with its result."""
    if diagnostic.figure_always:
        return list(rows), list(labels)
    pairs = [(row, label) for row, label in zip(rows, labels) if row.results.get(diagnostic.name) is not None]
    return [row for row, _ in pairs], [label for _, label in pairs]


def plot_report(report, rows=None) -> dict:
    """The overview, then the figure of every registered diagnostic that draws one, in registry order (over all
    the selected rows for a diagnostic drawn always, else over the rows that carry its result)."""
    _matplotlib()
    selected = report._select(rows)
    labels, colors = _labels_and_colors(selected)
    figures = {}
    if selected:
        figures["overview"] = _plot_overview(_new_figure, selected, labels, colors)
    for figure_name, diagnostic in _figure_diagnostics().items():
        drawn, drawn_labels = _carrying(diagnostic, selected, labels)
        if not drawn and not diagnostic.figure_always:
            continue
        figure = _diagnostic_figure(diagnostic, drawn, drawn_labels)
        if figure is not None:
            figures[figure_name] = figure
    return figures


def _diagnostic_figure(diagnostic, rows, labels):
    """A diagnostic's figure, or None; what it raises or returns instead of a matplotlib Figure is named as its own
    (`DiagnosticError`), not left as a traceback from deep inside the report."""
    from matplotlib.figure import Figure

    from ..diagnostics._base import DiagnosticError

    try:
        figure = diagnostic.figure(rows, labels)
    except DiagnosticError:
        raise
    except Exception as error:
        raise DiagnosticError(f"diagnostic {diagnostic.name!r} failed to draw its figure ({type(diagnostic).__name__}"
                              f".figure raised {type(error).__name__}: {error}) — fix its figure method, or return "
                              "None to draw nothing") from error
    if figure is not None and not isinstance(figure, Figure):
        shown = repr(figure) if len(repr(figure)) <= 60 else repr(figure)[:57] + "..."
        raise DiagnosticError(f"diagnostic {diagnostic.name!r}.figure returned {shown} ({type(figure).__name__}), "
                              "not a matplotlib Figure — return a matplotlib.figure.Figure, or None to draw nothing")
    return figure


class ReportDisplay:
    """One figure of a report, in the scikit-learn ``Display`` style: build it, then ``plot(ax=...)``.

    Example::

        >>> from jacobiscope.report import LayerResult, Report, ReportDisplay
        >>> row = LayerResult(0, "x", 0, "loop", None, 2, [2], [1.0, 0.9, 0.8], [0.1, 0.1],
        ...                   results={"energy": {"values": [1.0, 0.5, 0.2]}})
        >>> display = ReportDisplay.from_report(Report([row], {}, []), "energy").plot()
        >>> display.ax_.get_title().startswith("pseudo-energy"), len(display.ax_.lines)
        (True, 1)

    Kinds: ``overview`` (two Axes: lambda_max with its interval, and ``||J||_2`` / rho(J), one column per row) and
    the figure of every registered diagnostic, by its figure name or its own name: ``norms`` (= ``spectral_norm``,
    three: ``||J||_2``, state norm, relative step), ``eigenvalues`` (two: the spectrum against the unit circle, and
    modulus against angle), ``lyapunov`` (one per row with exponents), ``energy`` (one), ``clusters`` (two), and a
    user's diagnostic (as many as its result type's ``panels``). ``plot(ax=None)`` makes a new figure (Agg canvas,
    no pyplot); pass an Axes (or a sequence of as many Axes as the kind needs) to draw into a figure of your own.
    After ``plot``: ``figure_`` and ``ax_`` (an Axes, or a list of them). The constructor only stores its arguments.
    """

    def __init__(self, kind: str, rows: list, labels: list, colors: list, diagnostic=None):
        self.kind, self.rows, self.labels, self.colors, self.diagnostic = kind, rows, labels, colors, diagnostic

    @classmethod
    def from_report(cls, report, kind: str, rows=None) -> "ReportDisplay":
        """The display of ``kind`` (a figure name or a diagnostic's name) for ``report`` (``rows``: indices or rows
        to draw; default all)."""
        figures = _figure_diagnostics()
        names = {d.name: figure_name for figure_name, d in figures.items()}
        if kind != "overview" and kind not in figures and kind not in names:
            from .._validation import did_you_mean

            known = ["overview", *figures]
            raise ArgumentError(f"unknown figure kind {kind!r}{did_you_mean(str(kind), known + list(names))} — choose "
                             f"from {', '.join(known)}")
        diagnostic = None if kind == "overview" else figures.get(kind) or figures[names[kind]]
        selected = report._select(rows)
        labels, colors = _labels_and_colors(selected)
        if diagnostic is not None and not diagnostic.figure_always:
            keep = [i for i, row in enumerate(selected) if row.results.get(diagnostic.name) is not None]
            selected, labels, colors = ([sequence[i] for i in keep] for sequence in (selected, labels, colors))
        return cls(kind, selected, labels, colors, diagnostic)

    def _panels(self) -> int:
        if self.diagnostic is None:
            return 2
        return self.diagnostic.panel_count(self.diagnostic.entries(self.rows, self.labels, self.colors))

    def plot(self, ax=None) -> "ReportDisplay":
        """Draw on ``ax`` (an Axes, or a sequence of Axes for the multi-panel kinds), or on a new figure."""
        _matplotlib()
        needed = self._panels()
        if ax is None:
            figure, axes = self._new_axes(needed)
        else:
            axes = [ax] if hasattr(ax, "plot") else list(getattr(ax, "flat", ax))
            if len(axes) < needed:
                raise ArgumentError(f"the {self.kind} figure draws on {needed} Axes, got {len(axes)} — pass as many, "
                                 "or ax=None for a new figure")
            figure = axes[0].figure
        if self.diagnostic is None:
            _draw_overview(axes[:2], self.rows, self.labels, self.colors)
        elif getattr(self.diagnostic.result_type, "panels", 0) == 0:
            if ax is not None:
                raise ArgumentError(f"the {self.kind} figure is drawn whole by its diagnostic — call plot() without ax")
            figure = _diagnostic_figure(self.diagnostic, self.rows, self.labels)
            axes = list(figure.axes) if figure is not None else []
        else:
            self.diagnostic.draw(axes, self.diagnostic.entries(self.rows, self.labels, self.colors))
        self.figure_ = figure
        self.ax_ = axes[0] if needed == 1 and len(axes) == 1 else axes
        return self

    def save(self, path, *, format: str | None = None, dpi: float = 150):
        """Save this figure (drawn now if ``plot`` was not called); the format comes from ``format`` or the file's
        suffix: png, svg or pdf (vector, text kept as text)."""
        from .._figures import save_figure

        return save_figure(self, path, format=format, dpi=dpi)

    def _new_axes(self, needed: int):
        if self.diagnostic is None:
            figure = _new_figure(10.0, 6.4)
            return figure, list(figure.subplots(2, 1, sharex=True))
        if getattr(self.diagnostic.result_type, "panels", 0) == 0:
            return None, []
        from ..diagnostics._base import _figure_with_axes

        return _figure_with_axes(_new_figure, needed, self.diagnostic.result_type)
