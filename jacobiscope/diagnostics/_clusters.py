"""Token-cluster order parameters along the trajectory."""
from __future__ import annotations

from dataclasses import dataclass

from .._values import _finite_or_nan, _num
from ._base import Diagnostic, MeasureContext
from ._result import DiagnosticResult, bad, last, numbers

CLUSTER_KEYS = ("top_eigenvalue", "effective_clusters", "cluster_count")


@dataclass
class ClusterMeasurement(DiagnosticResult):
    """Token-cluster order parameters per loop ``t = 0..`` (the last finite loop).

    Example::

        >>> from jacobiscope.diagnostics import ClusterMeasurement
        >>> result = ClusterMeasurement([0.5, 0.9], [2.0, 1.1], [2, 1])
        >>> result.columns(), result.scalars()["final_cluster_count"]
        ({'eff. clusters': '1.1'}, 1)
    """

    top_eigenvalue: list
    effective_clusters: list
    cluster_count: list

    headers = ("eff. clusters",)
    scalar_names = ("final_top_eigenvalue", "final_effective_clusters", "final_cluster_count")
    glossary = {"eff. clusters": ("tokens", "effective number of token clusters at the last loop (1: all tokens "
                                            "agree).")}
    panels = 2
    figure_size = (11.0, 4.2)

    def columns(self) -> dict:
        value = last(self.effective_clusters)
        return {"eff. clusters": None if value is None else _num(value, ".3g")}

    def scalars(self) -> dict:
        return {f"final_{key}": last(getattr(self, key)) for key in CLUSTER_KEYS}

    def problems(self, name: str) -> list[str]:
        return [bad(f"{name}[{key!r}]", getattr(self, key), "a list of numbers") for key in CLUSTER_KEYS
                if not numbers(getattr(self, key))]

    def relation_problems(self, name: str, row) -> list[str]:
        # Fewer is fine: a row that went NaN/Inf stops at its last finite loop.
        return [f"{name}[{key!r}] has {len(getattr(self, key))} values, expected at most loops + 1 = {row.loops + 1}"
                for key in CLUSTER_KEYS if len(getattr(self, key)) > row.loops + 1]

    @classmethod
    def draw(cls, axes, entries) -> None:
        """The top eigenvalue, and the effective (solid) and counted (dashed) clusters against the loop."""
        from .._figures import legend

        ax_top, ax_count = axes
        for _, result, label, color in entries:
            if result is None:
                continue
            top = _finite_or_nan(result.top_eigenvalue)
            if top:
                ax_top.plot(range(len(top)), top, color=color, label=label)
            effective = _finite_or_nan(result.effective_clusters)
            if effective:
                ax_count.plot(range(len(effective)), effective, color=color, label=label)
            count = _finite_or_nan(result.cluster_count)
            if count:
                ax_count.plot(range(len(count)), count, color=color, ls="--", lw=1)
        ax_top.set_title("top eigenvalue")
        ax_count.set_title("clusters: effective (solid), count (dashed)")
        for ax in (ax_top, ax_count):
            ax.set_xlabel("loop t")
        legend(ax_count, len(entries))


class Clusters(Diagnostic):
    """Top eigenvalue of the tokens' second moment, effective and counted clusters, per loop (states read as
    ``[tokens, features]``; None for states without a token axis)."""

    name = "clusters"
    description = "token clustering: effective and counted clusters per loop"
    result_type = ClusterMeasurement
    listed = True
    column_prefix = ""  # the historic DataFrame names (max_spectral_norm, lambda_max, ...)

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
        silent = [t for t, zero in enumerate((states == 0).flatten(1).all(1).tolist()) if zero]
        if silent:  # zero tokens have no direction on the sphere: NaN there means undefined, not an overflow
            shown = ", ".join(map(str, silent[:5])) + (", ..." if len(silent) > 5 else "")
            context.flags.append(f"clusters: every token is zero at loop(s) {shown} — tokens without a direction "
                                 "have no order parameters, so those entries are NaN")
        return ClusterMeasurement(top_eigenvalue=order.top_eigenvalue.tolist(),
                                  effective_clusters=order.effective_clusters.tolist(),
                                  cluster_count=[int(c) for c in order.cluster_count.tolist()])
