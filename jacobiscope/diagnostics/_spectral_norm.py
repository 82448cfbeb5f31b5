"""``||J||_2`` at evenly sampled loops (Lanczos on ``J^T J`` through jvps and vjps)."""
from __future__ import annotations

from ._base import Diagnostic, MeasureContext
from ._results import SpectralNormMeasurement


def sample_loops(loops: int, samples: int) -> list[int]:
    """``samples`` loops evenly spaced over ``0..loops``, both ends included."""
    if samples <= 0:
        return []
    if samples == 1:
        return [loops]
    return sorted({round(i * loops / (samples - 1)) for i in range(samples)})


class SpectralNorm(Diagnostic):
    """The Jacobian's spectral norm ``||dF/dX||_2`` at ``spectral_samples`` loops of the trajectory."""

    name = "spectral_norm"
    result_type = SpectralNormMeasurement

    def cost(self, state_size, loops, options):
        # ~12 Lanczos steps per sampled loop at tol 1e-3 (8-14 measured on GPT-2, BERT and ItrSA blocks)
        steps = options.get("spectral_samples", 3) * 12
        return {"jvp": steps, "vjp": steps}

    def compute(self, context: MeasureContext):
        from ..linalg.svd import spectral_norm

        values = []
        for loop in sample_loops(context.last_finite, context.options.get("spectral_samples", 3)):
            # A Ritz value's error is about the square of its residual: 1e-3 gives sigma to ~1e-6.
            result = spectral_norm(context.looped, context.states[loop : loop + 1], tol=1e-3, max_iter=100,
                                   seed=context.options.get("seed", 0))
            values.append({"loop": loop, "value": float(result.value[0]), "tolerance": float(result.tolerance[0])})
        return SpectralNormMeasurement(samples=values)

    def fields(self, result) -> dict:
        return {"spectral_norm": result.to_dict()["samples"]}

    def from_row(self, row):
        return SpectralNormMeasurement(samples=list(row.spectral_norm))

    headers = ("max ||J||2",)

    def cells(self, scalars: dict) -> list[str]:
        from ..report._text import _num

        return [_num(scalars["max_spectral_norm"], ".4g")]

    figure_name = "norms"

    def figure(self, rows, labels):
        """The report's "norms" figure over ``rows``."""
        from ..report._plots import _labels_and_colors, _new_figure, _plot_norms

        return _plot_norms(_new_figure, rows, labels, _labels_and_colors(rows)[1])
