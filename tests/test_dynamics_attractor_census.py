"""`attractor_census` and the registered `attractors` diagnostic on maps whose attractors are known: a bistable
map's basin fractions (the normal probability of landing on each side), the logistic map's period-2 cycle and its
Floquet multiplier 4 + 2r - r^2, the chaotic logistic map (no period: unsettled), and a quality score that makes
one attractor the correct one."""
import math

import pytest
import torch

import jacobiscope
from jacobiscope.dynamics import attractor_census
from jacobiscope.errors import ArgumentError

F64 = torch.float64


def normal_cdf(z):
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


@pytest.mark.parametrize("centre, noise", [(0.5, 1.0), (1.0, 0.8), (-0.3, 2.0)])
def test_bistable_basin_fractions_are_the_normal_probabilities(centre, noise):
    looped = jacobiscope.LoopedMap(lambda x: torch.tanh(3.0 * x))
    row = jacobiscope.measure(looped, torch.tensor([centre], dtype=F64), loops=40, diagnostics=["attractors"],
                              options={"attractor_starts": 400, "attractor_noise": noise})
    census = row.results["attractors"]
    assert [a["kind"] for a in census.attractors] == ["fixed point", "fixed point"]
    # starts x0 + noise |x0| z land on the positive side with probability Phi(sign(x0) / noise)
    positive = normal_cdf(math.copysign(1.0, centre) / noise)
    plus = next(a for a in census.attractors if a["own"] == (centre > 0))   # x0 itself ends on sign(x0)'s side
    low, high = plus["interval"]
    assert low <= positive <= high, (plus["fraction"], positive)
    assert sum(a["starts"] for a in census.attractors) == 400


def test_the_logistic_period_two_cycle_is_one_attractor_with_its_floquet_multiplier():
    r = 3.2
    looped = jacobiscope.systems.logistic_map(r)
    row = jacobiscope.measure(looped, looped.x0, loops=200, diagnostics=["attractors"],
                              options={"attractor_starts": 16, "attractor_noise": 0.3})
    (cycle,) = row.results["attractors"].attractors   # starts end at either phase: still one attractor
    assert (cycle["kind"], cycle["period"], cycle["starts"]) == ("cycle", 2, 16)
    assert cycle["spectral_radius"] == pytest.approx(abs(4 + 2 * r - r * r), rel=1e-6)
    assert cycle["own"] and cycle["interval"][0] > 0.79   # 16 of 16: Wilson's lower bound


def test_the_chaotic_logistic_map_settles_nowhere():
    looped = jacobiscope.systems.logistic_map(4.0)
    census = attractor_census(looped.step, [looped.x0 + 0.01 * k for k in range(1, 9)], loops=100)
    assert {a.kind for a in census.attractors} == {"unsettled"} and all(a.period == 0 for a in census.attractors)
    assert census.forwards == 8 * (100 + 8)


def test_with_a_quality_score_the_correct_attractor_and_its_stability_are_named():
    """tanh(3x + 0.5): the positive fixed point has the larger basin and the flatter slope. Quality 'x > 0' makes
    it the correct one (most stable by every measure); quality 'x < 0' makes the other correct (by none)."""
    for sign, expected in ((1.0, True), (-1.0, False)):
        looped = jacobiscope.LoopedMap(lambda x: torch.tanh(3.0 * x + 0.5))
        looped.info.quality = lambda state, sign=sign: float(sign * float(state.reshape(-1)[0]) > 0)
        row = jacobiscope.measure(looped, torch.tensor([0.0], dtype=F64) + 0.1, loops=60,
                                  diagnostics=["attractors"], options={"attractor_starts": 200,
                                                                       "attractor_noise": 5.0})
        census = row.results["attractors"]
        correct = [a for a in census.attractors if a["correct"]]
        assert len(correct) == 1 and census.correct_fraction == correct[0]["fraction"]
        assert census.correct_interval[0] <= census.correct_fraction <= census.correct_interval[1]
        # both fixed points repeat exactly (residual 0): a tie, which counts for the correct one either way
        assert [a["residual"] for a in census.attractors] == [0.0, 0.0]
        assert census.correct_is_most_stable == {"largest_basin": expected, "smallest_residual": True,
                                                 "smallest_spectral_radius": expected}


@pytest.mark.parametrize("kwargs, words", [(dict(loops=0), "loops an int >= 1"),
                                           (dict(max_period=0), "max_period an int >= 1"),
                                           (dict(rtol=-1.0), "rtol a finite number > 0"),
                                           (dict(settle_rtol=math.inf), "settle_rtol a finite number > 0")])
def test_bad_arguments_are_refused_with_the_fix(kwargs, words):
    arguments = dict(loops=4) | kwargs
    with pytest.raises(ArgumentError, match=words):
        attractor_census(lambda x: 0.5 * x, [torch.ones(1)], **arguments)
    with pytest.raises(ArgumentError, match="no starts"):
        attractor_census(lambda x: 0.5 * x, [], loops=4)


def test_a_start_count_over_the_budget_is_refused_before_any_loop():
    with pytest.raises(ArgumentError, match="attractor_starts"):
        jacobiscope.measure(lambda x: 0.5 * x, torch.ones(2, dtype=F64), loops=100, diagnostics=["attractors"],
                            options={"attractor_starts": 4096})


def test_unsettled_attractors_carry_no_multiplier_and_raise_no_nan_flag():
    looped = jacobiscope.systems.logistic_map(4.0)
    row = jacobiscope.measure(looped, looped.x0, loops=50, diagnostics=["attractors"],
                              options={"attractor_starts": 4})
    census = row.results["attractors"]
    assert all(a["kind"] == "unsettled" and a["spectral_radius"] is None for a in census.attractors)
    assert not any("NaN/Inf" in flag for flag in row.flags)
