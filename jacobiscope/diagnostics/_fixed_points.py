"""Fixed points and basins: where perturbed starts end up, how many distinct end states, how stable each is."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch

from ..errors import ConvergenceWarning
from ._base import Diagnostic, MeasureContext, Option
from ._result import DiagnosticResult


@dataclass
class FixedPointsMeasurement(DiagnosticResult):
    """The end states of ``starts`` perturbed trajectories (noise ``noise`` x the RMS of ``x0``), clustered.

    ``basins``: one entry per distinct end state, largest first: ``fraction`` of the starts that reached it,
    ``settled`` (its last relative step is below 1e-4: a fixed point, not a point of a moving orbit), ``step`` (that
    relative step), ``spectral_radius`` of the Jacobian there (below 1: attracting), ``distance`` (relative RMS
    distance to the unperturbed trajectory's end state).
    """

    starts: int
    noise: float
    basins: list = field(default_factory=list)

    headers = ("basins", "main basin")
    glossary = {"basins": ("-", "distinct end states reached from the perturbed starts (fixed_points)."),
                "main basin": ("% of starts", "share of the starts that reached the most common end state.")}
    panels = 1
    figure_size = (7.0, 4.2)

    @property
    def count(self) -> int:
        return len(self.basins)

    def columns(self) -> dict:
        if not self.basins:
            return {"basins": "-"}
        return {"basins": self.count, "main basin": f"{100 * self.basins[0]['fraction']:.0f}%"}

    def scalars(self) -> dict:
        main = self.basins[0] if self.basins else {}
        return {"starts": self.starts, "noise": self.noise, "basins": self.count,
                "main_fraction": main.get("fraction"), "main_spectral_radius": main.get("spectral_radius")}

    @classmethod
    def draw(cls, axes, entries) -> None:
        """The share of the starts in each basin (largest first), one group of bars per row; hatched bars did not
        settle (a moving orbit, not a fixed point)."""
        from .._figures import legend, no_data

        ax, drawn = axes[0], 0
        width = 0.8 / max(1, sum(1 for entry in entries if entry.result is not None))
        for _, result, label, color in entries:
            if result is None or not result.basins:
                continue
            positions = [i + drawn * width for i in range(len(result.basins))]
            bars = ax.bar(positions, [b["fraction"] for b in result.basins], width=width, color=color, label=label)
            for bar, basin in zip(bars, result.basins):
                bar.set_hatch("" if basin["settled"] else "//")
            drawn += 1
        ax.set_xlabel("basin (largest first)")
        ax.set_ylabel("share of perturbed starts")
        ax.set_title("basins of the loop's end states")
        if not drawn:
            no_data(ax, "no basins in this report")
        legend(ax, drawn)


class FixedPoints(Diagnostic):
    """K perturbed starts run ``loops`` loops; their end states clustered (relative distance ``basin_rtol``); the
    fraction reaching each and the spectral radius of J there. Not run by default (``K x loops`` forwards)."""

    name = "fixed_points"
    description = "basin_starts perturbed runs: how many end states, which attractor"
    result_type = FixedPointsMeasurement
    default = False
    options = {
        "basin_starts": Option("count", 8, maximum=4096, doc="perturbed starts, each run the full loops"),
        "basin_noise": Option("tolerance", 0.1, doc="perturbation, relative to the RMS of x0"),
        "basin_rtol": Option("tolerance", 1e-2, doc="relative RMS distance under which two end states are one"),
    }
    def check_budget(self, state_size, loops, options):
        from .._validation import within_budget

        # every start runs the whole trajectory again: the starts x loops are loops of the map, on the loops budget
        within_budget(options.get("basin_starts", 8), "basin_starts", "loops", per_unit=loops,
                      unit="loops of the map")

    def cost(self, state_size, loops, options):
        starts = options.get("basin_starts", 8)
        return {"forward": starts * loops, "jvp": 30 * starts}

    def compute(self, context: MeasureContext):
        options = context.options
        starts, noise = int(options.get("basin_starts", 8)), float(options.get("basin_noise", 0.1))
        reference = context.states[context.last_finite]
        ends = [_end_state(context.looped, start, context.loops)
                for start in noised_starts(context.x0, starts, noise, int(options.get("seed", 0)))]
        clusters = _cluster([end for end, _ in ends], float(options.get("basin_rtol", 1e-2)))
        basins = []
        for members in sorted(clusters, key=len, reverse=True):
            end, step = ends[members[0]]
            rms = float(end.pow(2).mean().sqrt()) or 1.0
            basins.append({"fraction": len(members) / starts, "settled": bool(step < 1e-4), "step": step,
                           "spectral_radius": _spectral_radius(context.looped, end),
                           "distance": float((end - reference).pow(2).mean().sqrt()) / rms})
        return FixedPointsMeasurement(starts=starts, noise=noise, basins=basins)


def noised_starts(x0: torch.Tensor, count: int, noise: float, seed: int) -> list:
    """``count`` starts ``x0 + noise * rms(x0) * z`` (``z`` standard normal, drawn in float64 from ``seed`` on the
    CPU, so a seed gives the same starts on every device and dtype)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    scale = float(x0.pow(2).mean().sqrt()) or 1.0
    return [x0 + noise * scale * torch.randn(x0.shape, generator=generator, dtype=torch.float64).to(x0)
            for _ in range(count)]


def _end_state(looped, x: torch.Tensor, loops: int) -> tuple[torch.Tensor, float]:
    """The state after ``loops`` loops and its last relative step (inf when the run went non-finite)."""
    with torch.no_grad():
        previous = x
        for _ in range(loops):
            previous, x = x, looped.step(x)
    if not bool(torch.isfinite(x).all()):
        return x, math.inf
    step = float((x - previous).norm() / x.norm().clamp_min(1e-30))
    return x.detach(), step


def _cluster(ends: list, rtol: float) -> list[list[int]]:
    """Greedy clustering: an end state joins the first cluster whose first member is within ``rtol`` (relative RMS
    distance); non-finite end states form their own cluster."""
    clusters: list[list[int]] = []
    for index, end in enumerate(ends):
        finite = bool(torch.isfinite(end).all())
        for members in clusters:
            anchor = ends[members[0]]
            if not finite or not bool(torch.isfinite(anchor).all()):
                if finite == bool(torch.isfinite(anchor).all()) and not finite:
                    members.append(index)
                    break
                continue
            scale = float(anchor.pow(2).mean().sqrt()) or 1.0
            if float((end - anchor).pow(2).mean().sqrt()) <= rtol * scale:
                members.append(index)
                break
        else:
            clusters.append([index])
    return clusters


def _spectral_radius(looped, x: torch.Tensor) -> float:
    from ..linalg.eig import jacobian_eigenvalues

    if not bool(torch.isfinite(x).all()):
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = jacobian_eigenvalues(looped, x, k=min(2, x.numel()), tol=1e-4, max_restarts=8)
    return float(result.values.abs().max())
