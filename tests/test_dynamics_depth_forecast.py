"""`forecast_depth` on maps whose future is known in closed form: a settling mode hiding a growing one (the steps
shrink up to the trained depth, the Jacobian says they will grow), a contraction, a rotation, a single growing
mode continued geometrically past the jvp budget, and an exact fixed point."""
import math

import pytest
import torch

from jacobiscope.dynamics import forecast_depth
from jacobiscope.errors import ArgumentError

F64 = torch.float64


def trajectory(step, x0, loops):
    states = [x0]
    for _ in range(loops):
        states.append(step(states[-1]))
    return torch.stack(states)


def first_crossing(step, x0, trained, threshold, horizon):
    """The loop at which the true trajectory is ``threshold`` (relative) away from its trained-depth state."""
    states = trajectory(step, x0, horizon)
    reference = states[trained]
    return next((t for t in range(trained + 1, horizon + 1)
                 if float((states[t] - reference).norm() / reference.norm()) >= threshold), None)


@pytest.mark.parametrize("fast, slow, small, trained, threshold", [
    (0.5, 1.05, 1e-3, 8, 1.0), (0.3, 1.1, 1e-4, 6, 0.5), (0.8, 1.02, 1e-2, 12, 2.0), (-0.6, 1.08, 1e-3, 5, 1.0)])
def test_a_growing_mode_behind_shrinking_steps_is_forecast_exactly(fast, slow, small, trained, threshold):
    matrix = torch.diag(torch.tensor([fast, slow], dtype=F64))
    step = lambda x: matrix @ x  # noqa: E731
    x0 = torch.tensor([1.0, small], dtype=F64)
    states = trajectory(step, x0, trained)
    horizon = 400
    forecast = forecast_depth(step, states, trained, horizon=horizon, threshold=threshold)
    expected = first_crossing(step, x0, trained, threshold, horizon)
    assert expected is not None and forecast.collapse_loop == expected and forecast.word == "drifting"
    assert forecast.collapse_interval == [first_crossing(step, x0, trained, threshold / 2, horizon),
                                          first_crossing(step, x0, trained, 2 * threshold, horizon)]
    assert forecast.rate == pytest.approx(slow, rel=1e-3)   # the late steps grow at the slow mode's rate
    if abs(fast) < 0.9:  # the measured steps up to the trained depth shrink: they alone would miss it
        assert forecast.window_rate < 1


def test_a_contraction_settles_and_its_remaining_displacement_is_the_geometric_sum():
    rate = 0.7
    step = lambda x: 2.0 + rate * (x - 2.0)  # noqa: E731  fixed point 2, steps shrink by 0.7
    states = trajectory(step, torch.tensor([5.0, -1.0], dtype=F64), 6)
    forecast = forecast_depth(step, states, 6, horizon=24, threshold=0.5)
    assert forecast.word == "settling" and forecast.collapse_loop is None
    distance = float((states[6] - 2.0).norm() / states[6].norm())  # x_T to the fixed point, relative
    assert forecast.settled_displacement == pytest.approx(distance, rel=1e-6)
    assert forecast.rate == pytest.approx(rate, rel=1e-9) and forecast.window_rate == pytest.approx(rate, rel=1e-9)


@pytest.mark.parametrize("angle", [0.1, 0.37])
def test_a_rotation_is_marginal_until_its_chord_reaches_the_threshold(angle):
    """A rotation by ``angle``: steps keep their length (rate 1); the displacement after m loops is the chord
    2 sin(m angle / 2), bounded by 2 — a threshold above 2 is never reached (marginal), one below is at a known loop."""
    c, s = math.cos(angle), math.sin(angle)
    matrix = torch.tensor([[c, -s], [s, c]], dtype=F64)
    step = lambda x: matrix @ x  # noqa: E731
    states = trajectory(step, torch.tensor([1.0, 0.0], dtype=F64), 10)
    never = forecast_depth(step, states, 10, horizon=200, threshold=2.5)
    assert never.word == "marginal" and never.collapse_loop is None and never.rate == pytest.approx(1.0, abs=1e-9)
    crossing = forecast_depth(step, states, 10, horizon=200, threshold=1.0)
    loops = next(m for m in range(1, 200) if 2 * math.sin(m * angle / 2) >= 1.0 - 1e-12)
    assert crossing.word == "drifting" and crossing.collapse_loop == 10 + loops


def test_past_the_jvp_budget_a_single_mode_is_continued_exactly():
    step = lambda x: 1.01 * x + 0.0  # noqa: E731  one growing mode: geometric continuation is exact
    states = trajectory(step, torch.tensor([1.0, 2.0], dtype=F64), 4)
    forecast = forecast_depth(step, states, 4, horizon=2000, threshold=3.0, max_products=3)
    assert forecast.products == 3
    assert forecast.collapse_loop == first_crossing(step, states[0], 4, 3.0, 2000)


def test_an_exact_fixed_point_settles_with_no_displacement_and_no_products():
    step = lambda x: torch.zeros_like(x) + 1.0  # noqa: E731
    states = trajectory(step, torch.tensor([3.0], dtype=F64), 3)
    forecast = forecast_depth(step, states, 3, horizon=12, threshold=0.1)
    assert (forecast.word, forecast.collapse_loop, forecast.products, forecast.displacement) == (
        "settling", None, 0, [0.0])
    # eight loops: the steps 2, 0, 0, ...; the window (the second half) sees only zeros — the state stopped moving
    # exactly, a rate of 0 (was 0 / 0 = NaN, flagged on the row of every constant or projecting map)
    longer = forecast_depth(step, trajectory(step, torch.tensor([3.0], dtype=F64), 8), 8, horizon=12, threshold=0.1)
    assert longer.window_rate == 0.0 and longer.word == "settling"


def test_an_overflowing_forecast_leaves_at_once():
    step = lambda x: 1e200 * x  # noqa: E731
    states = trajectory(step, torch.tensor([1.0], dtype=F64), 1)
    forecast = forecast_depth(step, states, 1, horizon=8, threshold=0.5)
    assert forecast.word == "drifting" and forecast.collapse_loop == 2


@pytest.mark.parametrize("kwargs, words", [
    (dict(trained_loop=0), "trained_loop in \\[1, 4\\]"), (dict(trained_loop=5), "trained_loop in \\[1, 4\\]"),
    (dict(trained_loop=True), "trained_loop"), (dict(horizon=3), "horizon > trained_loop=3"),
    (dict(threshold=0.0), "finite threshold > 0"), (dict(threshold=math.nan), "finite threshold > 0"),
    (dict(threshold=True), "finite threshold > 0")])
def test_bad_arguments_are_refused_with_the_fix(kwargs, words):
    states = trajectory(lambda x: 0.5 * x, torch.ones(2, dtype=F64), 4)
    arguments = dict(trained_loop=3, horizon=12, threshold=0.5) | kwargs
    with pytest.raises(ArgumentError, match=words):
        forecast_depth(lambda x: 0.5 * x, states, arguments.pop("trained_loop"), **arguments)


def _kl(base_logits, logits):
    p = torch.log_softmax(base_logits, -1)
    return float((p.exp() * (p - torch.log_softmax(logits, -1))).sum(-1).mean())


def test_with_a_linear_readout_the_output_forecast_is_the_true_output_divergence():
    matrix = torch.diag(torch.tensor([0.5, 1.05, 0.9], dtype=F64))
    head = torch.tensor([[1.0, -2.0, 0.5, 0.0], [3.0, 1.0, -1.0, 2.0], [0.0, 0.5, 0.5, -1.0]], dtype=F64)
    step = lambda x: matrix @ x  # noqa: E731
    readout = lambda x: (x @ head).reshape(2, 2)  # noqa: E731  two positions of two classes
    x0 = torch.tensor([1.0, 0.05, -0.3], dtype=F64)
    states = trajectory(step, x0, 60)
    forecast = forecast_depth(step, states[:7], 6, horizon=60, threshold=1.0, readout=readout, output_threshold=0.2)
    truth = [_kl(readout(states[6]), readout(states[t])) for t in range(7, 61)]
    assert forecast.output_divergence == pytest.approx(truth[: len(forecast.output_divergence)], rel=1e-9)
    expected = next(t for t, value in zip(range(7, 61), truth) if value >= 0.2)
    assert forecast.judged_on == "output" and forecast.collapse_loop == forecast.output_leave_loop == expected
    assert forecast.word == "drifting"


def test_a_rotation_the_readout_cannot_see_moves_the_state_but_not_the_output():
    """The state rotates by 0.4 rad a loop (it leaves its trained-depth state), while the readout reads only the
    radius: the output forecast never moves, so the loop is marginal, not drifting."""
    c, s = math.cos(0.4), math.sin(0.4)
    matrix = torch.tensor([[c, -s], [s, c]], dtype=F64)
    step = lambda x: matrix @ x  # noqa: E731
    readout = lambda x: torch.stack([x.pow(2).sum(), torch.tensor(0.0, dtype=F64)])  # noqa: E731
    states = trajectory(step, torch.tensor([1.0, 0.0], dtype=F64), 8)
    forecast = forecast_depth(step, states, 8, horizon=32, threshold=0.5, readout=readout, output_threshold=0.01)
    assert forecast.state_leave_loop is not None and forecast.output_leave_loop is None
    assert forecast.word == "marginal" and forecast.collapse_loop is None
    assert max(forecast.output_divergence) < 1e-20


def test_a_settled_period_two_cycle_is_forecast_with_the_two_loop_map():
    """x -> -x on a unit vector plus a decaying part: consecutive states are 2 apart, yet the period-2 cycle is
    settled. The one-loop rule would see a state that leaves at once; the two-loop map sees it settle."""
    matrix = torch.diag(torch.tensor([-1.0, 0.5], dtype=F64))
    step = lambda x: matrix @ x  # noqa: E731
    states = trajectory(step, torch.tensor([1.0, 1.0], dtype=F64), 12)
    forecast = forecast_depth(step, states, 12, horizon=48, threshold=0.5)
    assert forecast.period == 2 and forecast.word == "settling" and forecast.collapse_loop is None
    assert forecast.displacement_loops[:3] == [14, 16, 18]
    # the two-loop map's steps shrink by 0.25 per period: the remaining displacement is the geometric sum
    remaining = float((states[12] - torch.tensor([1.0, 0.0], dtype=F64)).norm() / states[12].norm())
    assert forecast.settled_displacement == pytest.approx(remaining, rel=1e-9)
    assert forecast.rate == pytest.approx(0.25, rel=1e-9)
    assert forecast_depth(step, states, 12, horizon=48, threshold=0.5, max_period=1).word == "drifting"
