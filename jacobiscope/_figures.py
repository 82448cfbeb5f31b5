"""Matplotlib helpers shared by every diagnostic's figure and the report: Agg figures without pyplot, legends that
fit, gaps for NaN, log scales when data spans decades. The base layer: matplotlib is imported only when called."""
from __future__ import annotations

import math

__all__ = ["new_figure", "labels_and_colors"]

#: Marker cycle for scatter-like series (one per row).
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def matplotlib_classes():
    """``(Figure, FigureCanvasAgg)``, or an ImportError that says how to install matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            'Report.plot needs matplotlib, which is not installed: pip install "jacobiscope[plot]"'
        ) from None
    return Figure, FigureCanvasAgg


def new_figure(width, height, layout="constrained"):
    """A matplotlib Figure on its own Agg canvas: no pyplot, no window, freed with its last reference.

    Example::

        >>> from jacobiscope._figures import new_figure
        >>> figure = new_figure(4.0, 3.0)
        >>> tuple(figure.get_size_inches().tolist())
        (4.0, 3.0)
    """
    Figure, FigureCanvasAgg = matplotlib_classes()
    figure = Figure(figsize=(width, height), layout=layout)
    FigureCanvasAgg(figure)
    return figure


def auto_log(ax, series) -> None:
    """Log scale when positive data spans more than two decades (a diverging norm would flatten the rest)."""
    values = [v for s in series for v in s if not math.isnan(v)]
    if values and min(values) > 0 and max(values) / min(values) > 100:
        ax.set_yscale("log")


def legend(ax, count: int) -> None:
    """A legend inside the axes for a few series, outside (in columns) for many."""
    if not ax.get_legend_handles_labels()[0]:
        return
    if count <= 6:
        ax.legend(fontsize="small")
    else:
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0), ncols=1 + count // 20)


def points(values) -> dict:
    """Small markers on short or gappy series: a finite value between two NaNs would otherwise be invisible."""
    return {"marker": ".", "ms": 4} if len(values) <= 40 or any(math.isnan(v) for v in values) else {}


def no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def short(label: str, width: int = 28) -> str:
    return label if len(label) <= width else label[: width - 3] + "..."


def labels_and_colors(rows) -> tuple[list, list]:
    """Legend labels (mode / input only when they vary) and one color per row."""
    from matplotlib import colormaps

    with_mode = len({row.mode for row in rows}) > 1
    with_input = len({row.input_index for row in rows}) > 1
    labels = [row.label(with_mode=with_mode, with_input=with_input) for row in rows]
    palette = colormaps["tab10"] if len(rows) <= 10 else colormaps["viridis"]
    colors = [palette(i if len(rows) <= 10 else i / max(len(rows) - 1, 1)) for i in range(len(rows))]
    return labels, colors
