"""Figures of the theory modules: phase portraits of the token regimes and escape curves of online SGD.

Both functions simulate what they draw unless given the data, return a `matplotlib.figure.Figure` on the Agg canvas
(made without pyplot: the global backend is not touched and no window opens), and write it atomically when given a
path. matplotlib is imported only when a function is called (``pip install matplotlib``, the plot extra).

Example::

    >>> import pathlib, tempfile
    >>> from jacobiscope.theory.plots import plot_escape_curves
    >>> from jacobiscope.theory.aim import escape_runs
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     fig = plot_escape_curves(escape_runs(d=8, t=0.2, runs=1, records=4), path=pathlib.Path(folder) / "e.png")
    ...     (pathlib.Path(folder) / "e.png").stat().st_size > 0
    True
"""
from __future__ import annotations

import io
import math
from pathlib import Path

import torch

from .._io import atomic_write_bytes
from ..errors import ArgumentError
from . import aim, tokens

__all__ = ["plot_phase_portrait", "plot_escape_curves"]


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            'jacobiscope.theory.plots needs matplotlib, which is not installed: pip install matplotlib (the plot extra)'
        ) from None
    return Figure, FigureCanvasAgg


def _new_figure(width, height):
    Figure, FigureCanvasAgg = _matplotlib()
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path, dpi):
    if path is None:
        return
    path = Path(path)
    fmt = path.suffix[1:].lower() or "png"
    buffer = io.BytesIO()
    # No "Software" chunk in PNGs: the default one carries matplotlib's URL, and the file names nothing outside.
    extra = {"metadata": {"Software": None}} if fmt == "png" else {}
    figure.savefig(buffer, format=fmt, dpi=dpi, **extra)
    atomic_write_bytes(path, buffer.getvalue())


def _np(x):
    # matplotlib wants host arrays; this runs once per figure, outside any simulation loop.
    return x.detach().to("cpu").numpy()


def _matrix_text(M):
    return "[" + ", ".join("[" + ", ".join(f"{float(v):g}" for v in row) + "]" for row in M.tolist()) + "]"


def plot_phase_portrait(data: dict | None = None, *, n: int = 64, horizon: float = 30.0, dt: float = 0.02,
                        z0=0.3 + 0.1j, beta: float = 1.0, tokens_shown: int = 16, figure=None, path=None,
                        dpi: int = 100):
    """Phase portraits of the LSA token regimes in ``d = 2``: one column of panels per regime.

    Example::

        >>> from jacobiscope.theory.plots import plot_phase_portrait
        >>> fig = plot_phase_portrait(n=16, horizon=4.0, dt=0.05)
        >>> [ax.get_title().splitlines()[0] for ax in fig.axes if ax.get_label().endswith("/plane")]
        ['clustering', 'rotating clusters', 'oscillation', 'interior fixed point']

    Each column shows, for one ``(A, V)`` (default `jacobiscope.theory.tokens.REGIME_EXAMPLES`):

    - top (axes label ``"<regime>/plane"``): the trajectory of the particles' ``R_2`` in the complex plane (solid,
      gid ``"particles"``) over the OA solution (dashed, gid ``"oa"``), with the unit circle (clustered states);
    - middle (``"<regime>/modulus"``): ``|R_2|`` against time, particles and OA;
    - bottom (``"<regime>/tokens"``): token angles ``theta mod pi`` against time (LSA clusters are axes, so
      ``theta`` and ``theta + pi`` are one cluster), ``tokens_shown`` evenly spaced tokens, one line (gid
      ``"token <k>"``) each, drawn as points so the wrap at ``pi`` leaves no vertical stroke.

    Arguments:
        data: the output of `jacobiscope.theory.tokens.regime_trajectories` (simulated here when ``None`` with
            ``n``, ``horizon``, ``dt``, ``z0``, ``beta``).
        tokens_shown: tokens drawn in the bottom row.
        figure: draw into this (empty) matplotlib Figure instead of a new one.
        path: also write the figure there (format from the suffix, default PNG), atomically.
        dpi: resolution of the written file.

    Returns:
        The `matplotlib.figure.Figure`.

    References: theory spec A.2-A.4 (regime table).
    """
    if data is None:
        data = tokens.regime_trajectories(n=n, horizon=horizon, dt=dt, z0=z0, beta=beta)
    if not isinstance(data, dict) or not data:
        raise ArgumentError("data must be the non-empty dict returned by tokens.regime_trajectories.")
    if isinstance(tokens_shown, bool) or not isinstance(tokens_shown, int) or tokens_shown < 1:
        raise ArgumentError(f"tokens_shown must be a positive int, got {tokens_shown!r}.")
    columns = len(data)
    if figure is None:
        figure = _new_figure(3.2 * columns, 8.4)
    grid = figure.add_gridspec(3, columns, height_ratios=[1.25, 1.0, 1.0])
    circle = torch.linspace(0, 2 * math.pi, 361, dtype=torch.float64)
    for j, (name, item) in enumerate(data.items()):
        times, R2, Z, theta = (_np(item[k]) for k in ("times", "R2", "Z", "theta"))
        plane = figure.add_subplot(grid[0, j], label=f"{name}/plane")
        plane.plot(_np(circle.cos()), _np(circle.sin()), color="0.75", linewidth=0.8, gid="unit circle")
        plane.plot(R2.real, R2.imag, color="C0", linewidth=1.2, gid="particles", label="particles R_2")
        plane.plot(Z.real, Z.imag, color="C3", linestyle="--", linewidth=1.0, gid="oa", label="Ott-Antonsen Z")
        plane.plot([R2.real[0]], [R2.imag[0]], "o", color="k", markersize=3, gid="start")
        plane.set_aspect("equal")
        plane.set_xlim(-1.08, 1.08)
        plane.set_ylim(-1.08, 1.08)
        plane.set_xlabel("Re R_2")
        if j == 0:
            plane.set_ylabel("Im R_2")
            plane.legend(loc="lower left", fontsize=7)
        title = name.replace("_", " ")
        plane.set_title(f"{title}\nA={_matrix_text(item['A'])}\nV={_matrix_text(item['V'])}", fontsize=8)

        modulus = figure.add_subplot(grid[1, j], label=f"{name}/modulus")
        modulus.plot(times, _np(item["R2"].abs()), color="C0", linewidth=1.2, gid="particles")
        modulus.plot(times, _np(item["Z"].abs()), color="C3", linestyle="--", linewidth=1.0, gid="oa")
        modulus.set_ylim(-0.03, 1.03)
        modulus.set_xlabel("t")
        if j == 0:
            modulus.set_ylabel("|R_2|")

        angles = figure.add_subplot(grid[2, j], label=f"{name}/tokens")
        count = theta.shape[1]
        spacing = (count - 1) / max(tokens_shown - 1, 1)
        shown = sorted({int(round(k * spacing)) for k in range(min(tokens_shown, count))})
        wrapped = _np(torch.remainder(item["theta"], math.pi))
        for k in shown:
            angles.plot(times, wrapped[:, k], ".", markersize=1.0, gid=f"token {k}")
        angles.set_ylim(0, math.pi)
        angles.set_xlabel("t")
        if j == 0:
            angles.set_ylabel("theta mod pi")
    _save(figure, path, dpi)
    return figure


def plot_escape_curves(results: dict | None = None, *, link: str = "he2", d: int = 16, t: float = 2.0,
                       eta: float = 0.01, threshold: float = 0.3, ax=None, path=None, dpi: int = 100, **kwargs):
    """Escape curves of online SGD: the weak-recovery order parameter against gradient-flow time, per parameterization.

    Example::

        >>> from jacobiscope.theory.plots import plot_escape_curves
        >>> fig = plot_escape_curves(d=8, t=0.2, runs=1, records=4)
        >>> sorted({line.get_gid().split("/")[0] for line in fig.axes[0].lines if "/" in (line.get_gid() or "")})
        ['direct, S0 = 0', 'direct, random S0', 'tied', 'untied']

    One line per run (gid ``"<label>/<run>"``): the centred cosine ``cos_c`` (its absolute value for He2, which
    cannot see the sign of ``S``: the quantity `jacobiscope.theory.aim.weak_recovery` thresholds) at the recorded
    times. ``cos_c`` of the zero matrix is undefined and drawn as 0, so the He2 direct student started at the exact
    critical point ``S0 = 0`` lies flat on the axis while the tied one climbs past the threshold (dotted, gid
    ``"threshold"``). Escape times are marked on the threshold (gid ``"<label>/escape"``).

    Arguments:
        results: ``{label: AIMRun}`` (e.g. `jacobiscope.theory.aim.escape_runs`); simulated here when ``None``
            with ``link``, ``d``, ``t``, ``eta`` and ``kwargs`` (e.g. ``runs``, ``clip``, ``seed``) passed to
            `escape_runs`.
        link: the link of the runs (decides ``|cos_c|`` versus ``cos_c``).
        threshold: the weak-recovery threshold drawn.
        ax: draw into this matplotlib Axes (its figure is returned) instead of a new figure.
        path: also write the figure there (format from the suffix, default PNG), atomically.
        dpi: resolution of the written file.

    Returns:
        The `matplotlib.figure.Figure`.

    References: theory spec B.1 (weak recovery), B.4.
    """
    if results is None:
        results = aim.escape_runs(d=d, link=link, t=t, eta=eta, **kwargs)
    elif kwargs:
        raise ArgumentError(f"{sorted(kwargs)} configure the simulation; they cannot apply to results passed in.")
    if not isinstance(results, dict) or not results or not all(isinstance(r, aim.AIMRun) for r in results.values()):
        raise ArgumentError("results must be a non-empty dict {label: AIMRun}, e.g. from aim.escape_runs.")
    if ax is None:
        figure = _new_figure(6.4, 4.0)
        ax = figure.add_subplot(label="escape")
    else:
        figure = ax.figure
    for i, (label, run) in enumerate(results.items()):
        cos = run.order["cos_c"].abs() if link == "he2" else run.order["cos_c"]
        cos = torch.nan_to_num(cos, nan=0.0).reshape(cos.shape[0], -1)
        times = _np(run.times)
        escapes = run.escape_time.reshape(-1)
        for j in range(cos.shape[1]):
            ax.plot(times, _np(cos[:, j]), color=f"C{i}", linewidth=1.2, alpha=0.85, gid=f"{label}/{j}",
                    label=label if j == 0 else f"_{label} {j}")
        finite = escapes[torch.isfinite(escapes)]
        if finite.numel():
            ax.plot(_np(finite), [threshold] * finite.numel(), "v", color=f"C{i}", markersize=6,
                    gid=f"{label}/escape")
    ax.axhline(threshold, color="0.4", linestyle=":", linewidth=1.0, gid="threshold")
    first = next(iter(results.values()))
    d_run = first.S.shape[-1]
    ax.set_xlabel("gradient-flow time t = samples * eta / d^2")
    ax.set_ylabel("|cos_c| (centred overlap)" if link == "he2" else "cos_c (centred overlap)")
    ax.set_title(f"Escape from an uninformative start: {link}, d = {d_run}")
    ax.legend(fontsize=8, loc="best")
    _save(figure, path, dpi)
    return figure
