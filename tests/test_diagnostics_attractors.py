"""The `attractors` result as the report shows it: settled attractors listed, unsettled starts counted apart (not
one "attractor" each), the main attractor the largest settled one, the figure's last hollow bar all the unsettled
starts with their Wilson interval (checked against the score formula written out here)."""
import math

import pytest
import torch

import jacobiscope
from jacobiscope.diagnostics._attractors import AttractorsMeasurement, _bars


def attractor(kind, starts, total, period=1):
    return {"kind": kind, "period": period, "starts": starts, "fraction": starts / total, "interval": [0.0, 1.0],
            "residual": 0.0, "spectral_radius": None, "own": False, "quality": None, "correct": None}


def wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def census(*kinds_and_starts, total=20):
    return AttractorsMeasurement(starts=total, noise=0.5, loops=8,
                                 attractors=[attractor(kind, n, total) for kind, n in kinds_and_starts])


def test_unsettled_starts_are_counted_not_listed_and_the_main_attractor_is_settled():
    result = census(("unsettled", 1), ("fixed point", 12), ("cycle", 4), ("unsettled", 1), ("unsettled", 2))
    columns = result.columns()
    assert columns["attractors"] == "2 (FC) + 4/20 starts unsettled"
    assert columns["main attractor"].startswith("60% [")
    nothing_settled = census(("unsettled", 1), ("unsettled", 1), total=2).columns()
    assert nothing_settled == {"attractors": "0 + 2/2 starts unsettled", "main attractor": "none settled"}


def test_the_figure_bars_are_the_settled_attractors_then_one_bar_for_every_unsettled_start():
    result = census(("fixed point", 12), ("unsettled", 1), ("cycle", 4), ("unsettled", 3))
    bars = _bars(result)
    assert [b["kind"] for b in bars] == ["fixed point", "cycle", "unsettled"]
    assert bars[-1]["fraction"] == pytest.approx(4 / 20)
    assert bars[-1]["interval"] == pytest.approx(wilson(4, 20), abs=1e-12)


def test_a_census_in_a_report_draws_one_hollow_bar_for_the_unsettled_starts():
    pytest.importorskip("matplotlib")
    # rotation by an irrational angle: no start settles within the loops
    angle = 1.0
    rotation = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]],
                            dtype=torch.float64)
    looped = jacobiscope.LoopedMap(lambda x: x @ rotation)
    row = jacobiscope.measure(looped, torch.tensor([1.0, 0.0], dtype=torch.float64), loops=12,
                              diagnostics=["attractors"], options={"attractor_starts": 8})
    result = row.results["attractors"]
    assert all(a["kind"] == "unsettled" for a in result.attractors)
    axes = jacobiscope.Report([row]).plot()["attractors"].axes[0]
    patches = [p for p in axes.patches if p.get_height() > 0]
    assert len(patches) == 1 and not patches[0].get_fill() and patches[0].get_height() == pytest.approx(1.0)
