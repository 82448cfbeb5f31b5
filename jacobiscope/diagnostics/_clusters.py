"""Token-cluster order parameters along the trajectory."""
from __future__ import annotations

from ._base import Diagnostic, MeasureContext
from ._results import ClusterMeasurement


class Clusters(Diagnostic):
    """Top eigenvalue of the tokens' second moment, effective and counted clusters, per loop (states read as
    ``[tokens, features]``; None for states without a token axis)."""

    name = "clusters"
    result_type = ClusterMeasurement

    def cost(self, state_size, loops, options):
        return {"forward": 0.3 * (loops + 1)}  # a small eigenproblem per state: a fraction of a block forward

    def compute(self, context: MeasureContext):
        from ..dynamics.clusters import token_order_parameters

        states = context.states[: context.last_finite + 1]
        # A model's own loop keeps its batch axis of one in the state ([1, tokens, features]): drop such axes, so
        # every loop gets one set of order parameters (not a list per leading axis).
        while states.dim() > 3 and states.shape[1] == 1:
            states = states.squeeze(1)
        if states.dim() != 3:
            return None  # no token axis (or several examples in one state): a state must be [tokens, features]
        order = token_order_parameters(states)
        return ClusterMeasurement(top_eigenvalue=order.top_eigenvalue.tolist(),
                             effective_clusters=order.effective_clusters.tolist(),
                             cluster_count=[int(c) for c in order.cluster_count.tolist()])

    def fields(self, result) -> dict:
        return {"clusters": None if result is None else result.to_dict()}

    def from_row(self, row):
        return None if row.clusters is None else ClusterMeasurement.from_dict(row.clusters)

    headers = ("eff. clusters",)

    def cells(self, scalars: dict) -> list[str]:
        from ..report._text import _num

        return [_num(scalars["final_effective_clusters"], ".3g")]

    figure_name = "clusters"

    def figure(self, rows, labels):
        """The report's "clusters" figure over ``rows`` (None when no row has data for it)."""
        from ..report._plots import _labels_and_colors, _new_figure, _plot_clusters

        if not (any(isinstance(row.clusters, dict) and row.clusters for row in rows)):
            return None
        return _plot_clusters(_new_figure, rows, labels, _labels_and_colors(rows)[1])
