"""The pseudo-energy ``-Tr(X_t^T Y_t)`` along the trajectory, for maps with a drive."""
from __future__ import annotations

from ._base import Diagnostic, MeasureContext
from ._results import EnergyMeasurement


class Energy(Diagnostic):
    """``E_t = -Tr(X_t^T Y_t)`` at every finite loop; None for maps without a drive."""

    name = "energy"
    result_type = EnergyMeasurement

    def cost(self, state_size, loops, options):
        return {"forward": loops + 1}  # one drive evaluation per state

    def compute(self, context: MeasureContext):
        from ..dynamics.energy import pseudo_energy

        if context.looped.drive_function is None:
            return None
        states = context.states[: context.last_finite + 1].unsqueeze(1)
        return EnergyMeasurement(values=pseudo_energy(states, context.looped).reshape(-1).tolist())

    def fields(self, result) -> dict:
        return {"energy": None if result is None else result.values}

    def from_row(self, row):
        return None if row.energy is None else EnergyMeasurement(values=list(row.energy))

    figure_name = "energy"

    def figure(self, rows, labels):
        """The report's "energy" figure over ``rows`` (None when no row has data for it)."""
        from ..report._plots import _labels_and_colors, _new_figure, _plot_energy

        if not (any(row.energy for row in rows)):
            return None
        return _plot_energy(_new_figure, rows, labels, _labels_and_colors(rows)[1])
