"""Matplotlib helpers shared by every diagnostic's figure and the report: Agg figures without pyplot, legends that
fit, gaps for NaN, log scales when data spans decades. The base layer: matplotlib is imported only when called."""
from __future__ import annotations

import math
from .errors import ArgumentError, ArgumentTypeError

__all__ = ["new_figure", "labels_and_colors", "save_figure", "figure_bytes",
           "figure_format", "FIGURE_FORMATS"]

#: Marker cycle for scatter-like series (one per row).
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def matplotlib_classes():
    """``(Figure, FigureCanvasAgg)``, or an ImportError that says how to install matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            'Report.plot needs matplotlib, which is not installed: pip install matplotlib (the plot extra)'
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


def row_names(rows, *, max_label: int = 48) -> list[str]:
    """One name per row, the same in the verdict lines and the figures' legends and columns: the layer (when the
    rows hold several, or when nothing else varies), the mode (when several), the input's own label, shortened
    (when several inputs).

    Example::

        >>> from types import SimpleNamespace as Row
        >>> rows = [Row(layer=layer, mode="block", input_index=i, input_label=f"text {i}") for layer in (0, 3)
        ...         for i in (0, 1)]
        >>> row_names(rows)[:2]
        ['layer 0, text 0', 'layer 0, text 1']
    """
    from ._values import _shorten, _single_line

    with_layer = len({row.layer for row in rows}) > 1
    with_mode = len({row.mode for row in rows}) > 1
    with_input = len({(row.input_index, str(row.input_label)) for row in rows}) > 1
    names = []
    for row in rows:
        parts = [f"layer {row.layer}"] if with_layer else []
        parts += [str(row.mode)] if with_mode else []
        parts += [_shorten(_single_line(str(row.input_label)), max_label)] if with_input else []
        names.append(", ".join(parts) or f"layer {row.layer}")
    return names


def labels_and_colors(rows) -> tuple[list, list]:
    """Legend labels (`row_names`: the names the verdict lines use; "(flagged)" added) and one color per row."""
    from matplotlib import colormaps

    labels = [name + (" (flagged)" if row.flags else "") for name, row in zip(row_names(rows), rows)]
    palette = colormaps["tab10"] if len(rows) <= 10 else colormaps["viridis"]
    colors = [palette(i if len(rows) <= 10 else i / max(len(rows) - 1, 1)) for i in range(len(rows))]
    return labels, colors


#: The file formats a figure is saved in: PNG (raster, at ``dpi``), SVG and PDF (vector, for papers).
FIGURE_FORMATS = ("png", "svg", "pdf")

# Vector files keep their text as text (SVG <text>, PDF TrueType fonts: journals refuse Type 3), carry no date
# and use a fixed hash salt for their ids, so the same figure writes the same bytes every time.
_VECTOR_RC = {"svg.fonttype": "none", "pdf.fonttype": 42, "ps.fonttype": 42, "svg.hashsalt": "jacobiscope"}
_METADATA = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None, "Producer": None}}


def figure_format(path=None, format: str | None = None) -> str:
    """The format a figure is saved in: ``format`` when given, else the file suffix of ``path``.

    Example::

        >>> from jacobiscope._figures import figure_format
        >>> figure_format("figures/norms.SVG"), figure_format("norms.png", format="pdf")
        ('svg', 'pdf')
    """
    if format is not None:
        if not isinstance(format, str) or format.lower().lstrip(".") not in FIGURE_FORMATS:
            raise ArgumentError(f"unknown figure format {format!r} — pass format= one of {', '.join(FIGURE_FORMATS)}")
        return format.lower().lstrip(".")
    suffix = str(path).rsplit(".", 1)[-1].lower() if path is not None and "." in str(path) else ""
    if suffix not in FIGURE_FORMATS:
        raise ArgumentError(f"cannot tell the figure format from {str(path)!r} (suffix {suffix or 'none'!r}) — end the "
                         f"file name in .png, .svg or .pdf, or pass format= one of {', '.join(FIGURE_FORMATS)}")
    return suffix


def figure_bytes(figure, format: str = "png", *, dpi: float = 150) -> bytes:
    """The figure's file content in ``format`` (png, svg or pdf): vector text and paths for svg and pdf.

    Example::

        >>> from jacobiscope._figures import figure_bytes, new_figure
        >>> figure = new_figure(2.0, 2.0)
        >>> _ = figure.subplots().set_title("hello")
        >>> b"hello" in figure_bytes(figure, "svg"), figure_bytes(figure, "pdf")[:5]
        (True, b'%PDF-')
    """
    import io

    from matplotlib import rc_context

    format = figure_format(format=format)
    figure = _as_figure(figure)
    buffer = io.BytesIO()
    with rc_context(_VECTOR_RC):
        figure.savefig(buffer, format=format, dpi=dpi, metadata=_METADATA[format])
    return buffer.getvalue()


def save_figure(figure, path, *, format: str | None = None, dpi: float = 150):
    """Save a figure (a matplotlib Figure, or a display such as `ReportDisplay`) to ``path``, atomically.

    Example::

        >>> import pathlib, tempfile
        >>> from jacobiscope._figures import new_figure, save_figure
        >>> figure = new_figure(2.0, 2.0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     save_figure(figure, pathlib.Path(folder) / "f.pdf").read_bytes()[:5]
        b'%PDF-'

    The format is ``format`` (png, svg or pdf) or else the file suffix; SVG and PDF are vector files (text kept as
    text, no date, the same bytes each time), PNG is drawn at ``dpi``. Returns the path.
    """
    from ._io import atomic_write_bytes, check_file_path

    chosen = figure_format(path, format)
    check_file_path(path, "save_figure")
    return atomic_write_bytes(path, figure_bytes(figure, chosen, dpi=dpi), what="save_figure")


def _as_figure(figure):
    """A matplotlib Figure from a Figure or a display (its ``figure_``, drawn first if it was not yet)."""
    if hasattr(figure, "savefig"):
        return figure
    if hasattr(figure, "plot") and hasattr(figure, "kind"):  # a display: draw it if it was not drawn yet
        if getattr(figure, "figure_", None) is None:
            figure = figure.plot()
        if figure.figure_ is None:
            raise ArgumentError(f"the {figure.kind} display drew no figure — nothing to save")
        return figure.figure_
    raise ArgumentTypeError(f"expected a matplotlib Figure or a display, got {type(figure).__name__} — pass e.g. "
                    "report.plot()['norms'] or report.display('norms')")
