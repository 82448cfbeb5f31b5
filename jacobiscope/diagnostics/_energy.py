"""The pseudo-energy ``-Tr(X_t^T Y_t)`` along the trajectory, for maps with a drive."""
from __future__ import annotations

from ._base import Diagnostic, MeasureContext


class Energy(Diagnostic):
    """``E_t = -Tr(X_t^T Y_t)`` at every finite loop; None for maps without a drive."""

    name = "energy"

    def cost(self, state_size, loops, options):
        return {"forward": loops + 1}  # one drive evaluation per state

    def compute(self, context: MeasureContext):
        from ..dynamics.energy import pseudo_energy

        if context.looped.drive_function is None:
            return None
        states = context.states[: context.last_finite + 1].unsqueeze(1)
        return pseudo_energy(states, context.looped).reshape(-1).tolist()

    def fields(self, result) -> dict:
        return {"energy": result}

    figure_name = "energy"

    def figure(self, rows, labels):
        """The report's "energy" figure over ``rows`` (None when no row has data for it)."""
        from ..report._plots import _labels_and_colors, _new_figure, _plot_energy

        if not (any(row.energy for row in rows)):
            return None
        return _plot_energy(_new_figure, rows, labels, _labels_and_colors(rows)[1])
