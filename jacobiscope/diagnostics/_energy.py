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
