"""The report's figures (matplotlib, Agg, no pyplot) and the `Display` objects that draw them."""
from __future__ import annotations

import math

from ._values import _finite_or_nan
from ._text import _num


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            'Report.plot needs matplotlib, which is not installed: pip install "jacobiscope[plot]"'
        ) from None
    return Figure, FigureCanvasAgg


def _auto_log(ax, series) -> None:
    """Log scale when positive data spans more than two decades (a diverging norm would flatten the rest)."""
    values = [v for s in series for v in s if not math.isnan(v)]
    if values and min(values) > 0 and max(values) / min(values) > 100:
        ax.set_yscale("log")


def _legend(ax, count: int) -> None:
    if not ax.get_legend_handles_labels()[0]:
        return
    if count <= 6:
        ax.legend(fontsize="small")
    else:
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0), ncols=1 + count // 20)


def _points(values) -> dict:
    """Small markers on short or gappy series: a finite value between two NaNs would otherwise be invisible."""
    return {"marker": ".", "ms": 4} if len(values) <= 40 or any(math.isnan(v) for v in values) else {}


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def _plot_eigenvalues(new_figure, rows, labels, colors):
    figure = new_figure(12.0, 5.0)
    _draw_eigenvalues(figure.subplots(1, 2, width_ratios=(1.0, 1.15)), rows, labels, colors)
    return figure


def _eigen_pairs(row):
    return [pair for pair in (row.eigenvalues or []) if isinstance(pair, (list, tuple)) and len(pair) == 2]


def _draw_eigenvalues(axes, rows, labels, colors):
    """Left: the complex plane with the unit circle. Right: modulus against angle, which stays readable when the
    eigenvalues crowd near 1 (the usual case for a trained loop)."""
    plane, polar = axes
    angles = [2 * math.pi * i / 256 for i in range(257)]
    plane.plot([math.cos(a) for a in angles], [math.sin(a) for a in angles], color="0.5", lw=1, label="unit circle",
               gid="unit-circle")
    plane.axhline(0, color="0.85", lw=0.8, zorder=0)
    plane.axvline(0, color="0.85", lw=0.8, zorder=0)
    polar.axhline(1.0, color="0.5", lw=1, label="|$\\mu$| = 1")
    drawn = 0
    for i, (row, label, color) in enumerate(zip(rows, labels, colors)):
        pairs = _eigen_pairs(row)
        if not pairs:
            continue
        real = _finite_or_nan(p[0] for p in pairs)
        imag = _finite_or_nan(p[1] for p in pairs)
        suffix = f" (t={row.eigen_loop})" if row.eigen_loop is not None else ""
        style = dict(linestyle="none", marker=_MARKERS[i % len(_MARKERS)], ms=5, alpha=0.8, color=color)
        plane.plot(real, imag, label=label + suffix, **style)
        polar.plot([math.atan2(y, x) for x, y in zip(real, imag)], [math.hypot(x, y) for x, y in zip(real, imag)],
                   label=label + suffix, **style)
        drawn += 1
    # Outside the axes: eigenvalues can sit anywhere, a legend inside would cover some.
    if drawn:
        polar.legend(fontsize="small" if drawn <= 6 else "x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                     ncols=1 + drawn // 20)
    plane.set_aspect("equal", adjustable="datalim")
    plane.set_xlabel("Re $\\mu$")
    plane.set_ylabel("Im $\\mu$")
    plane.set_title("eigenvalues $\\mu$ of J = dF/dX (top-k by modulus)")
    polar.set_xlim(-math.pi - 0.1, math.pi + 0.1)
    polar.set_xticks([-math.pi, -math.pi / 2, 0, math.pi / 2, math.pi], ["$-\\pi$", "$-\\pi/2$", "0", "$\\pi/2$",
                                                                         "$\\pi$"])
    polar.set_xlabel("angle arg $\\mu$ (rad; 0 = real positive, $\\pm\\pi$ = real negative)")
    polar.set_ylabel("modulus |$\\mu$|")
    polar.set_title("the same eigenvalues: modulus against angle")
    if not drawn:
        _no_data(plane, "no eigenvalues in this report")


def _lambda_interval(row):
    """(late estimate, 95% half-width, first loop, last loop) from the verdict's evidence, or from the exponent
    and its standard error (t with 9 degrees of freedom) for reports without it; None when not measured."""
    evidence = row.evidence if isinstance(row.evidence, dict) else {}
    late, width = evidence.get("lambda_late"), evidence.get("lambda_half_width")
    if isinstance(late, (int, float)) and isinstance(width, (int, float)):
        first, _, last = str(evidence.get("lambda_loops", "")).partition("-")
        return late, width, int(first) if first.isdigit() else None, int(last) if last.isdigit() else None
    lyapunov = row.lyapunov if isinstance(row.lyapunov, dict) else {}
    if lyapunov.get("exponents"):
        stderr = (lyapunov.get("stderr") or [math.nan])[0]
        return lyapunov["exponents"][0], 2.262 * stderr if stderr is not None else math.nan, None, None
    return None


def _plot_overview(new_figure, rows, labels, colors):
    figure = new_figure(max(7.0, min(16.0, 2.0 + 0.45 * len(rows))) , 6.4)
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
    for x, row, color in zip(positions, rows, colors):
        interval = _lambda_interval(row)
        if interval is not None:
            late, width, _, _ = interval
            ax_lambda.errorbar([x], [late], yerr=[[width if math.isfinite(width) else 0.0]] * 2, fmt="o", ms=5,
                               color=color, capsize=3)
        scalars = row.scalars()
        if scalars["max_spectral_norm"] is not None:
            ax_norm.plot([x], [scalars["max_spectral_norm"]], "o", color=color, ms=6)
        if scalars["spectral_radius"] is not None:
            ax_norm.plot([x], [scalars["spectral_radius"]], "x", color=color, ms=7, mew=2)
    ax_norm.plot([], [], "o", color="0.3", label="max $\\|J\\|_2$ over sampled loops")
    ax_norm.plot([], [], "x", color="0.3", mew=2, label="$\\rho(J)$ at the last loop")
    ax_lambda.set_ylabel("$\\lambda_{max}$ (nats/loop)")
    ax_lambda.set_title("largest Lyapunov exponent: late-half estimate and 95% interval")
    ax_norm.set_ylabel("norm / radius of J")
    ax_norm.set_title("Jacobian J = dF/dX: spectral norm and spectral radius")
    step = max(1, math.ceil(len(rows) / 40))
    ax_norm.set_xticks(positions[::step], [_short(label) for label in labels][::step], rotation=35, ha="right",
                       fontsize="small" if len(rows) <= 20 else "x-small")
    ax_norm.set_ylim(bottom=0)
    ax_lambda.legend(fontsize="small", loc="best")
    ax_norm.legend(fontsize="small", loc="best")


def _short(label: str, width: int = 28) -> str:
    return label if len(label) <= width else label[: width - 3] + "..."


def _plot_norms(new_figure, rows, labels, colors):
    figure = new_figure(14.0, 4.2)
    _draw_norms(figure.subplots(1, 3), rows, labels, colors)
    return figure


def _draw_norms(axes, rows, labels, colors):
    ax_sigma, ax_state, ax_step = axes
    sigma_series, state_series, step_series = [], [], []
    for row, label, color in zip(rows, labels, colors):
        samples = [e for e in row.spectral_norm if isinstance(e, dict) and "loop" in e]
        if samples:
            values = _finite_or_nan(e.get("value") for e in samples)
            ax_sigma.plot([e["loop"] for e in samples], values, marker="o", ms=3, color=color, label=label)
            sigma_series.append(values)
        if row.state_norm:
            values = _finite_or_nan(row.state_norm)
            ax_state.plot(range(len(values)), values, color=color, label=label, **_points(values))
            state_series.append(values)
        if row.step_size:
            values = _finite_or_nan(row.step_size)
            ax_step.plot(range(len(values)), values, color=color, label=label, **_points(values))
            step_series.append(values)
    ax_sigma.axhline(1.0, color="0.5", ls=":", lw=1)
    for ax, series, title, ylabel in (
        (ax_sigma, sigma_series, "Jacobian spectral norm", "$\\|J\\|_2$"),
        (ax_state, state_series, "state norm (RMS per token)", "$\\|X_t\\|$"),
        (ax_step, step_series, "relative step", "$\\|X_{t+1}-X_t\\| / \\|X_t\\|$"),
    ):
        ax.set_title(title)
        ax.set_xlabel("loop t")
        ax.set_ylabel(ylabel)
        _auto_log(ax, series)
        if not series:
            _no_data(ax, "not measured")
    _legend(ax_step, len(rows))


def _plot_lyapunov(new_figure, rows, labels, colormap):
    measured = [(row, label) for row, label in zip(rows, labels)
                if isinstance(row.lyapunov, dict) and row.lyapunov.get("history")]
    if not measured:
        figure = new_figure(6.0, 4.0)
        ax = figure.add_subplot()
        ax.set_title("Lyapunov exponents")
        _no_data(ax, "no Lyapunov exponents in this report")
        return figure
    columns = min(3, len(measured))
    lines = math.ceil(len(measured) / columns)
    height = 3.2 * lines
    if len(measured) <= 12:
        figure = new_figure(4.6 * columns, height)
    else:
        # The constrained-layout solver costs as much as drawing once per panel: fixed margins for big grids.
        figure = new_figure(4.6 * columns, height, layout=None)
        figure.subplots_adjust(left=0.07, right=0.98, top=1 - 0.55 / height, bottom=0.45 / height, hspace=0.55,
                               wspace=0.3)
    _draw_lyapunov(list(figure.subplots(lines, columns, squeeze=False).flat), measured, colormap)
    return figure


def _draw_lyapunov(axes, measured, colormap):
    for index, ax in enumerate(axes):
        if index >= len(measured):
            ax.set_visible(False)
            continue
        row, label = measured[index]
        history = [step for step in row.lyapunov["history"] if isinstance(step, (list, tuple))]
        k = max((len(step) for step in history), default=0)
        loops = list(range(1, len(history) + 1))
        for j in range(k):
            values = _finite_or_nan(step[j] if j < len(step) else None for step in history)
            ax.plot(loops, values, color=colormap(0.85 * j / max(k - 1, 1)), lw=1.2, **_points(values),
                    label=f"$\\lambda_{{{j + 1}}}$" if k <= 4 else None)
        ax.axhline(0.0, color="0.5", ls=":", lw=1)
        interval = _lambda_interval(row)
        if interval is not None and interval[2] is not None and math.isfinite(interval[1]):
            late, width, first, last = interval
            ax.fill_between([first, last], [late - width] * 2, [late + width] * 2, color="tab:orange", alpha=0.25,
                            lw=0, label="late estimate, 95%")
            ax.plot([first, last], [late, late], color="tab:orange", lw=1)
        exponents = row.lyapunov.get("exponents") or []
        stderr = row.lyapunov.get("stderr") or []
        title = label
        if exponents:
            title += f"\n$\\lambda_1$ = {_num(exponents[0])}"
            if stderr:
                title += f" $\\pm$ {_num(stderr[0], '.2g')}"
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("loop t")
        ax.set_ylabel("running estimate (nats/loop)")
        if k <= 4:
            ax.legend(fontsize="x-small")


def _plot_energy(new_figure, rows, labels, colors):
    figure = new_figure(7.0, 4.2)
    _draw_energy(figure.add_subplot(), rows, labels, colors)
    return figure


def _draw_energy(ax, rows, labels, colors):
    drawn = 0
    for row, label, color in zip(rows, labels, colors):
        if row.energy:
            values = _finite_or_nan(row.energy)
            ax.plot(range(len(values)), values, color=color, label=label, **_points(values))
            drawn += 1
    ax.set_title("pseudo-energy $E_t = -\\mathrm{Tr}(X_t^\\top Y_t)$")
    ax.set_xlabel("loop t")
    ax.set_ylabel("$E_t$")
    _legend(ax, drawn)


def _plot_clusters(new_figure, rows, labels, colors):
    figure = new_figure(11.0, 4.2)
    _draw_clusters(figure.subplots(1, 2), rows, labels, colors)
    return figure


def _draw_clusters(axes, rows, labels, colors):
    ax_top, ax_count = axes
    for row, label, color in zip(rows, labels, colors):
        if not isinstance(row.clusters, dict):
            continue
        top = _finite_or_nan(row.clusters.get("top_eigenvalue"))
        if top:
            ax_top.plot(range(len(top)), top, color=color, label=label)
        effective = _finite_or_nan(row.clusters.get("effective_clusters"))
        if effective:
            ax_count.plot(range(len(effective)), effective, color=color, label=label)
        count = _finite_or_nan(row.clusters.get("cluster_count"))
        if count:
            ax_count.plot(range(len(count)), count, color=color, ls="--", lw=1)
    ax_top.set_title("top eigenvalue")
    ax_count.set_title("clusters: effective (solid), count (dashed)")
    for ax in (ax_top, ax_count):
        ax.set_xlabel("loop t")
    _legend(ax_count, len(rows))


def _new_figure(width, height, layout="constrained"):
    """A matplotlib Figure on its own Agg canvas: no pyplot, no window, freed with its last reference."""
    Figure, FigureCanvasAgg = _matplotlib()
    figure = Figure(figsize=(width, height), layout=layout)
    FigureCanvasAgg(figure)
    return figure


def plot_report(report, rows=None) -> dict:
    """The figures of every registered diagnostic that draws one, in registry order: the built-ins over all the
    selected rows, a user's diagnostic over the rows that carry its result."""
    _matplotlib()
    from ..diagnostics._base import _REGISTRY, list_diagnostics

    selected = report._select(rows)
    labels, _ = _labels_and_colors(selected)
    list_diagnostics()
    figures = {}
    if selected:
        figures["overview"] = _plot_overview(_new_figure, selected, labels, _labels_and_colors(selected)[1])
    for name, diagnostic in _REGISTRY.items():
        if hasattr(diagnostic, "figure_name"):  # a built-in: drawn for every row
            figure = diagnostic.figure(selected, labels)
            if figure is not None:
                figures[diagnostic.figure_name] = figure
            continue
        carrying = [(row, label) for row, label in zip(selected, labels) if name in (row.extra or {})]
        if carrying:
            figure = _user_figure(diagnostic, [row for row, _ in carrying], [label for _, label in carrying])
            if figure is not None:
                figures[name] = figure
    return figures


def _user_figure(diagnostic, rows, labels):
    """A registered (user) diagnostic's figure, or None; what it raises or returns instead of a matplotlib Figure is
    named as its own (`DiagnosticError`), not left as a traceback from deep inside the report."""
    from matplotlib.figure import Figure

    from ..diagnostics._base import DiagnosticError

    try:
        figure = diagnostic.figure(rows, labels)
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

        >>> import math
        >>> from jacobiscope.report import LayerResult, Report, ReportDisplay
        >>> row = LayerResult(0, "x", 0, "loop", None, 2, [2], [1.0, 0.9, 0.8], [0.1, 0.1], [], [[0.5, 0.2]], 2,
        ...                   None, None, None, [1.0, 0.5, 0.2], "converging", {}, [], 0.0)
        >>> display = ReportDisplay.from_report(Report([row], {}, []), "energy").plot()
        >>> display.ax_.get_title().startswith("pseudo-energy"), len(display.ax_.lines)
        (True, 1)

    Kinds and the axes they draw on: ``overview`` (two: lambda_max with its interval, and ``||J||_2`` / rho(J), one
    column per row), ``eigenvalues`` (two: the spectrum against the unit circle, and modulus against angle), ``energy``
    (one), ``norms`` (three: ``||J||_2``, state norm, relative step), ``clusters`` (two), ``lyapunov`` (one per row
    with exponents). ``plot(ax=None)`` makes a new figure (Agg canvas, no pyplot); pass an Axes (or a sequence of
    as many Axes as the kind needs) to draw into a figure of your own. After ``plot``: ``figure_`` and ``ax_``
    (an Axes, or a list of them). The constructor only stores its arguments.
    """

    PANELS = {"overview": 2, "eigenvalues": 2, "energy": 1, "norms": 3, "clusters": 2, "lyapunov": None}
    _SIZES = {"overview": (10.0, 6.4), "eigenvalues": (12.0, 5.0), "energy": (7.0, 4.2), "norms": (14.0, 4.2),
              "clusters": (11.0, 4.2)}

    def __init__(self, kind: str, rows: list, labels: list, colors: list):
        self.kind, self.rows, self.labels, self.colors = kind, rows, labels, colors

    @classmethod
    def from_report(cls, report, kind: str, rows=None) -> "ReportDisplay":
        """The display of ``kind`` for ``report`` (``rows``: indices or rows to draw; default all)."""
        if kind not in cls.PANELS:
            raise ValueError(f"unknown figure kind {kind!r} — choose from {', '.join(cls.PANELS)}")
        selected = report._select(rows)
        labels, colors = _labels_and_colors(selected)
        return cls(kind, selected, labels, colors)

    def _measured(self):
        return [(row, label) for row, label in zip(self.rows, self.labels)
                if isinstance(row.lyapunov, dict) and row.lyapunov.get("history")]

    def plot(self, ax=None) -> "ReportDisplay":
        """Draw on ``ax`` (an Axes, or a sequence of Axes for the multi-panel kinds), or on a new figure."""
        Figure, FigureCanvasAgg = _matplotlib()
        needed = self.PANELS[self.kind] or max(len(self._measured()), 1)
        if ax is None:
            width, height = self._SIZES.get(self.kind, (4.6 * min(3, needed), 3.2 * math.ceil(needed / 3)))
            figure = Figure(figsize=(width, height), layout="constrained")
            FigureCanvasAgg(figure)
            if self.kind == "lyapunov":
                axes = list(figure.subplots(math.ceil(needed / 3), min(3, needed), squeeze=False).flat)
            elif self.kind == "overview":
                axes = list(figure.subplots(2, 1, sharex=True))
            else:
                axes = list(figure.subplots(1, needed, squeeze=False).flat)
        else:
            axes = [ax] if hasattr(ax, "plot") else list(getattr(ax, "flat", ax))
            if len(axes) < needed:
                raise ValueError(f"the {self.kind} figure draws on {needed} Axes, got {len(axes)} — pass as many, "
                                 "or ax=None for a new figure")
            figure = axes[0].figure
        if self.kind == "overview":
            _draw_overview(axes[:2], self.rows, self.labels, self.colors)
        elif self.kind == "eigenvalues":
            _draw_eigenvalues(axes[:2], self.rows, self.labels, self.colors)
        elif self.kind == "energy":
            _draw_energy(axes[0], self.rows, self.labels, self.colors)
        elif self.kind == "norms":
            _draw_norms(axes[:3], self.rows, self.labels, self.colors)
        elif self.kind == "clusters":
            _draw_clusters(axes[:2], self.rows, self.labels, self.colors)
        else:
            from matplotlib import colormaps

            measured = self._measured()
            if measured:
                _draw_lyapunov(axes, measured, colormaps["viridis"])
            else:
                axes[0].set_title("Lyapunov exponents")
                _no_data(axes[0], "no Lyapunov exponents in this report")
        self.figure_ = figure
        self.ax_ = axes[0] if self.PANELS[self.kind] == 1 else axes
        return self


def _labels_and_colors(selected):
    from matplotlib import colormaps

    with_mode = len({row.mode for row in selected}) > 1
    with_input = len({row.input_index for row in selected}) > 1
    labels = [row.label(with_mode=with_mode, with_input=with_input) for row in selected]
    palette = colormaps["tab10"] if len(selected) <= 10 else colormaps["viridis"]
    colors = [palette(i if len(selected) <= 10 else i / max(len(selected) - 1, 1)) for i in range(len(selected))]
    return labels, colors
