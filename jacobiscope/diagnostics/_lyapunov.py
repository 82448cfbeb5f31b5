"""The top-``k`` Lyapunov exponents along the trajectory, with running estimates."""
from __future__ import annotations

from ._base import Diagnostic, MeasureContext
from ._results import LyapunovMeasurement


class Lyapunov(Diagnostic):
    """QR/Benettin with ``k`` tangent vectors as vmapped jvps over the ``loops`` loops from ``x0``."""

    name = "lyapunov"
    result_type = LyapunovMeasurement

    def cost(self, state_size, loops, options):
        return {"jvp_block": loops}  # per loop: the k tangents as one vmapped jvp, then a QR

    def compute(self, context: MeasureContext):
        from ..dynamics.lyapunov import lyapunov_spectrum

        count = min(context.options.get("k", 4), context.state_size)
        result = lyapunov_spectrum(context.looped, context.x0, steps=context.loops, k=count,
                                   seed=context.options.get("seed", 0))
        return LyapunovMeasurement(exponents=result.exponents[0].tolist(), stderr=result.stderr[0].tolist(),
                              history=result.history[:, 0].tolist(), kaplan_yorke=float(result.kaplan_yorke[0]))

    def fields(self, result) -> dict:
        return {"lyapunov": result.to_dict()}

    def from_row(self, row):
        return None if row.lyapunov is None else LyapunovMeasurement.from_dict(row.lyapunov)

    headers = ("lambda_max +/- se",)

    def cells(self, scalars: dict) -> list[str]:
        from ..report._text import _num

        if scalars["lambda_max"] is None:
            return ["-"]
        if scalars["lambda_max_stderr"] is None:
            return [_num(scalars["lambda_max"])]
        return [f"{_num(scalars['lambda_max'])} +/- {_num(scalars['lambda_max_stderr'], '.2g')}"]

    figure_name = "lyapunov"

    def figure(self, rows, labels):
        """The report's "lyapunov" figure over ``rows``."""
        from matplotlib import colormaps

        from ..report._plots import _new_figure, _plot_lyapunov

        return _plot_lyapunov(_new_figure, rows, labels, colormaps["viridis"])
