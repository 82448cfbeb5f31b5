"""The attractor census of one input: noised starts, their fixed points and cycles, basins with intervals, the
Floquet multipliers at each, and — with a quality score — whether the correct attractor is the most stable.

Example::

    >>> import torch, jacobiscope
    >>> looped = jacobiscope.LoopedMap(lambda x: torch.tanh(3.0 * x))          # bistable: +-0.9949
    >>> row = jacobiscope.measure(looped, torch.tensor([0.5], dtype=torch.float64), loops=40,
    ...                           diagnostics=["attractors"], options={"attractor_starts": 200,
    ...                                                                "attractor_noise": 1.0})
    >>> census = row.results["attractors"]
    >>> [(a["kind"], round(a["fraction"], 2)) for a in census.attractors]
    [('fixed point', 0.83), ('fixed point', 0.17)]
    >>> low, high = census.attractors[0]["interval"]
    >>> low < 0.8413 < high                                                   # P(0.5 + 0.5 z > 0), z ~ N(0, 1)
    True
    >>> round(census.attractors[0]["spectral_radius"], 4)                   # 3 (1 - x*^2), x* = 0.99491
    0.0305

The starts are ``x0 + attractor_noise * rms(x0) * z`` (a large noise is close to random states); each runs the
row's loops, then `jacobiscope.dynamics.attractor_census` sorts the end states. A cycle is a fixed point of
``power(p)``: its spectral radius is that of ``J_{F^p}``, the largest Floquet multiplier.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._base import Diagnostic, MeasureContext, Option
from ._fixed_points import _spectral_radius, noised_starts
from ._result import DiagnosticResult


@dataclass
class AttractorsMeasurement(DiagnosticResult):
    """The census of ``starts`` noised starts (noise ``noise`` x the RMS of ``x0``), each run ``loops`` loops.

    ``attractors``: largest basin first, each ``{kind ("fixed point" / "cycle" / "unsettled"), period, starts,
    fraction, interval (95% Wilson), residual (||F^p(x) - x|| / ||x||), spectral_radius (of J_{F^p} at the point:
    the largest Floquet multiplier's modulus; None when unsettled: no orbit to linearize at), own (the unperturbed run ends on it), quality
    (the map's score at the point, or None), correct (quality >= attractor_correct_quality, or None)}``.
    With a quality score: ``correct_fraction`` and ``correct_interval`` (share of the starts on a correct attractor)
    and ``correct_is_most_stable`` (``{"largest_basin", "smallest_residual", "smallest_spectral_radius"}``: whether
    a correct attractor is first by each, among the settled ones); None without one.
    """

    starts: int
    noise: float
    loops: int
    attractors: list = field(default_factory=list)
    correct_fraction: float | None = None
    correct_interval: list | None = None
    correct_is_most_stable: dict | None = None

    headers = ("attractors", "main attractor")
    glossary = {"attractors": ("-", "distinct settled attractors the noised starts reached: fixed points (F), cycles "
                                    "(C); + the starts whose orbit did not settle (attractors)."),
                "main attractor": ("% of starts", "share of the starts on the most common settled attractor, 95% "
                                                  "interval.")}
    panels = 1
    figure_size = (7.0, 4.2)

    def columns(self) -> dict:
        if not self.attractors:
            return {"attractors": "-"}
        settled = [a["kind"][0].upper() for a in self.attractors if a["kind"] != "unsettled"]
        unsettled = sum(a["starts"] for a in self.attractors if a["kind"] == "unsettled")
        # unsettled starts are counted, not listed: 32 orbits that did not settle are not 32 attractors
        letters = "".join(settled[:8]) + ("..." if len(settled) > 8 else "")
        text = f"{len(settled)} ({letters})" if settled else "0"
        if unsettled:
            text += f" + {unsettled}/{self.starts} starts unsettled"
        main = next((a for a in self.attractors if a["kind"] != "unsettled"), None)
        if main is None:
            return {"attractors": text, "main attractor": "none settled"}
        low, high = main["interval"]
        return {"attractors": text,
                "main attractor": f"{100 * main['fraction']:.0f}% [{100 * low:.0f}, {100 * high:.0f}]"}

    def scalars(self) -> dict:
        main = self.attractors[0] if self.attractors else {}
        return {"starts": self.starts, "noise": self.noise, "attractors": len(self.attractors),
                "fixed_points": sum(a["kind"] == "fixed point" for a in self.attractors),
                "cycles": sum(a["kind"] == "cycle" for a in self.attractors),
                "unsettled": sum(a["kind"] == "unsettled" for a in self.attractors),
                "main_fraction": main.get("fraction"), "main_spectral_radius": main.get("spectral_radius"),
                "correct_fraction": self.correct_fraction}

    @classmethod
    def draw(cls, axes, entries) -> None:
        """The share of the starts on each attractor (largest first) with its 95% interval, one group of bars per
        row; hatched: a cycle; one hollow bar for all the starts that did not settle; a star over a correct one."""
        from .._figures import legend, no_data

        ax, drawn, most = axes[0], 0, 0
        width = 0.8 / max(1, sum(1 for entry in entries if entry.result is not None))
        for _, result, label, color in entries:
            if result is None or not result.attractors:
                continue
            bars = _bars(result)
            positions = [i + drawn * width for i in range(len(bars))]
            fractions = [a["fraction"] for a in bars]
            errors = [[a["fraction"] - a["interval"][0] for a in bars], [a["interval"][1] - a["fraction"] for a in bars]]
            drawn_bars = ax.bar(positions, fractions, width=width, color=color, label=label, yerr=errors, capsize=2)
            for bar, attractor, x in zip(drawn_bars, bars, positions):
                bar.set_hatch("//" if attractor["kind"] == "cycle" else "")
                if attractor["kind"] == "unsettled":
                    bar.set_fill(False)
                    bar.set_edgecolor(color)
                if attractor.get("correct"):
                    ax.plot([x], [attractor["interval"][1] + 0.03], marker="*", color=color)
            drawn += 1
            most = max(most, len(bars))
        # one tick per rank, under the middle of its group of bars
        ax.set_xticks([i + (drawn - 1) * width / 2 for i in range(most)], [str(i + 1) for i in range(most)])
        ax.set_xlabel("attractor (largest basin first; the last hollow bar: all unsettled starts)")
        ax.set_ylabel("share of noised starts")
        ax.set_ylim(0, 1.1)
        ax.set_title("attractor census: basins (cycles hatched, unsettled hollow, * correct)")
        if not drawn:
            no_data(ax, "no attractor census in this report")
        legend(ax, drawn)


def _bars(result: AttractorsMeasurement) -> list:
    """The settled attractors as they are, then one bar for every start that did not settle (with its interval)."""
    from .._proportions import wilson_interval

    bars = [a for a in result.attractors if a["kind"] != "unsettled"]
    unsettled = sum(a["starts"] for a in result.attractors if a["kind"] == "unsettled")
    if unsettled:
        bars.append({"kind": "unsettled", "fraction": unsettled / result.starts,
                     "interval": list(wilson_interval(unsettled, result.starts))})
    return bars


class Attractors(Diagnostic):
    """Noised starts (``attractor_starts``, noise ``attractor_noise`` x rms(x0)) run the row's loops; their end
    states sorted into fixed points and cycles (a fixed point of ``power(p)``, ``p <= attractor_max_period``) and
    unsettled orbits; basins with 95% intervals, the Floquet multipliers at each, and with a quality score the
    share of starts that reach a correct attractor. Not run by default (starts x loops forwards)."""

    name = "attractors"
    description = "attractor census: fixed points, cycles, basins with intervals, Floquet multipliers"
    figure_caption = ("The attractor census: the share of noised starts that end on each attractor, largest basin "
                      "first (fixed points filled, cycles hatched, unsettled orbits hollow, the correct one starred "
                      "when the model has a quality score), with 95% Wilson intervals.")
    result_type = AttractorsMeasurement
    default = False
    options = {
        "attractor_starts": Option("count", 32, maximum=4096, doc="noised starts, each run the full loops"),
        "attractor_noise": Option("tolerance", 0.1, doc="perturbation, relative to the RMS of x0"),
        "attractor_max_period": Option("count", 8, maximum=1024, doc="longest cycle looked for"),
        "attractor_settle_rtol": Option("positive", 1e-4, doc="relative return residual that counts as settled"),
        "attractor_rtol": Option("positive", 1e-2, doc="relative RMS distance under which two end states are one"),
        "attractor_correct_quality": Option("tolerance", 1.0, doc="quality score that counts as correct"),
    }

    def check_budget(self, state_size, loops, options):
        from .._validation import within_budget

        per_start = loops + options.get("attractor_max_period", 8)
        within_budget(options.get("attractor_starts", 32), "attractor_starts", "loops", per_unit=per_start,
                      unit="loops of the map")

    def cost(self, state_size, loops, options):
        starts = options.get("attractor_starts", 32)
        return {"forward": starts * (loops + options.get("attractor_max_period", 8)), "jvp": 30 * 4}

    def compute(self, context: MeasureContext):
        from ..dynamics._attractor_census import attractor_census, wilson_interval

        options = context.options
        starts, noise = int(options.get("attractor_starts", 32)), float(options.get("attractor_noise", 0.1))
        max_period = int(options.get("attractor_max_period", 8))
        kicks = noised_starts(context.x0, starts, noise, int(options.get("seed", 0)))  # as fixed_points draws them
        census = attractor_census(context.looped.step, kicks, loops=context.loops, max_period=max_period,
                                  settle_rtol=float(options.get("attractor_settle_rtol", 1e-4)),
                                  rtol=float(options.get("attractor_rtol", 1e-2)))
        own = context.states[context.last_finite].unsqueeze(0)
        quality = context.looped.info.quality
        threshold = float(options.get("attractor_correct_quality", 1.0))
        attractors = [self._describe(context, attractor, own, quality, threshold, float(options.get(
            "attractor_rtol", 1e-2))) for attractor in census.attractors]
        result = AttractorsMeasurement(starts=starts, noise=noise, loops=context.loops, attractors=attractors)
        if callable(quality):
            correct = sum(a["starts"] for a in attractors if a["correct"])
            result.correct_fraction = correct / starts
            result.correct_interval = list(wilson_interval(correct, starts))
            result.correct_is_most_stable = _most_stable(attractors)
        return result

    @staticmethod
    def _describe(context, attractor, own, quality, threshold, rtol) -> dict:
        from ._loop_depth import _score

        point = attractor.point
        settled = attractor.period > 0
        scale = float(point.pow(2).mean().sqrt()) or 1.0
        on_orbit = attractor.orbit if settled else [point]
        own_distance = min(float((own - p).pow(2).mean().sqrt()) for p in on_orbit) / scale
        info = context.looped.info
        score = None
        if callable(quality):
            state = point[0] if info.unbatched_original else point
            with torch.no_grad():
                score = _score(quality, state, context.loops)
        return {"kind": attractor.kind, "period": attractor.period, "starts": attractor.starts,
                "fraction": attractor.fraction, "interval": list(attractor.interval),
                "residual": attractor.residual,
                "spectral_radius": _floquet_radius(context.looped, point, attractor.period) if settled else None,
                "own": bool(own_distance <= rtol), "quality": score,
                "correct": None if score is None else bool(math.isfinite(score) and score >= threshold)}


def _floquet_radius(looped, point: torch.Tensor, period: int) -> float:
    """The largest Floquet multiplier's modulus: the spectral radius of ``J_{F^p}`` at a point of the orbit."""
    return _spectral_radius(looped.power(period) if period > 1 else looped, point)


def _most_stable(attractors: list) -> dict | None:
    settled = [a for a in attractors if a["kind"] != "unsettled"]
    if not settled or not any(a["correct"] for a in settled):
        return None

    def first_is_correct(key):
        ranked = sorted(settled, key=key)
        best = key(ranked[0])
        return any(a["correct"] for a in ranked if key(a) == best)

    return {"largest_basin": first_is_correct(lambda a: -a["fraction"]),
            "smallest_residual": first_is_correct(lambda a: a["residual"]),
            "smallest_spectral_radius": first_is_correct(lambda a: a["spectral_radius"] if isinstance(
                a["spectral_radius"], float) and math.isfinite(a["spectral_radius"]) else math.inf)}
