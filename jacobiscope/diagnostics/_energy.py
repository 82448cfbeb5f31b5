"""The pseudo-energy ``-Tr(X_t^T Y_t)`` along the trajectory, for maps with a drive."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._values import _finite_or_nan
from ._base import Diagnostic, MeasureContext
from ._result import DiagnosticResult, bad, last, numbers


@dataclass
class EnergyMeasurement(DiagnosticResult):
    """The pseudo-energy ``E_t = -Tr(X_t^T Y_t)`` per loop.

    Example::

        >>> from jacobiscope.diagnostics import EnergyMeasurement
        >>> EnergyMeasurement([3.0, 2.0, 1.5]).scalars()
        {'final_energy': 1.5}
    """

    values: list

    scalar_names = ("final_energy",)
    panels = 1
    figure_size = (7.0, 4.2)

    def scalars(self) -> dict:
        return {"final_energy": last(self.values)}

    def problems(self, name: str) -> list[str]:
        return [] if numbers(self.values) else [bad(name, self.values, "null or a list of numbers")]

    @classmethod
    def draw(cls, axes, entries) -> None:
        from .._figures import legend, points

        ax, drawn = axes[0], 0
        for _, result, label, color in entries:
            if result is not None and result.values:
                values = _finite_or_nan(result.values)
                ax.plot(range(len(values)), values, color=color, label=label, **points(values))
                drawn += 1
        ax.set_title("pseudo-energy $E_t = -\\mathrm{Tr}(X_t^\\top Y_t)$")
        ax.set_xlabel("loop t")
        ax.set_ylabel("$E_t$")
        legend(ax, drawn)


class Energy(Diagnostic):
    """``E_t = -Tr(X_t^T Y_t)`` at every finite loop; None for maps without a drive."""

    name = "energy"
    description = "pseudo-energy -Tr(X^T Y) per loop, for maps with a drive"
    result_type = EnergyMeasurement
    listed = True
    column_prefix = ""  # the historic DataFrame names (max_spectral_norm, lambda_max, ...)

    def cost(self, state_size, loops, options):
        return {"forward": loops + 1}  # one drive evaluation per state

    def compute(self, context: MeasureContext):
        from ..dynamics.energy import pseudo_energy

        if context.looped.drive_function is None:
            return None
        states = context.states[: context.last_finite + 1]
        # The drive gets each state as the map's step does, [1, *state]: handed the whole trajectory at once (what
        # pseudo_energy does for a map without x0 to infer its layout from) it got [loops + 1, 1, *state].
        with torch.no_grad():
            drives = [context.looped.drive(state.unsqueeze(0)) for state in states]
        wanted = (1, *states.shape[1:])
        bad_drive = next((y for y in drives if not isinstance(y, torch.Tensor) or tuple(y.shape) != wanted), None)
        if bad_drive is not None:
            from ..errors import StepOutputError

            shown = list(bad_drive.shape) if isinstance(bad_drive, torch.Tensor) else type(bad_drive).__name__
            raise StepOutputError(f"the map's drive returned {shown} for a state of shape {list(wanted)} — it must "
                                  "return Y_t shaped like its input state")
        values = pseudo_energy(states, torch.cat(drives).to(states.dtype), batch_dims=1)
        return EnergyMeasurement(values=values.reshape(-1).tolist())
