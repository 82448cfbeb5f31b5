import json
import math
import warnings

import pytest
import torch

import jacobiscope
from jacobiscope.dynamics.regime import REGIMES, RegimeVerdict, classify_dynamics
from jacobiscope.errors import ArgumentError


def _rotation(angle, scale=1.0):
    return scale * torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]],
                                dtype=torch.float64)


def _classify(m, x0=None, *, steps=400, transient=100, length=200, **kwargs):
    """Measure a map the way a user would (exponent + stderr + flag from the engine, states from trajectory)."""
    x0 = m.x0 if x0 is None else x0
    lyap = jacobiscope.lyapunov_spectrum(m, x0, steps=steps, k=1, transient=transient)
    states = m.trajectory(x0, steps=length, on_nonfinite="ignore")
    verdict = classify_dynamics(max_lyapunov=lyap.exponents[0], max_lyapunov_stderr=lyap.stderr[0],
                                nonfinite_step=lyap.nonfinite_step, states=states, **kwargs)
    return verdict, lyap


def _assert_plain_json(verdict):
    record = verdict.as_dict()
    assert record["regime"] == verdict.regime and record["reason"] == verdict.evidence["reason"]
    assert all(isinstance(v, (float, int, str, bool)) for v in record["evidence"].values())
    json.dumps(record, allow_nan=False)


def test_logistic_r4_is_chaotic_with_ln2():
    verdict, lyap = _classify(jacobiscope.systems.logistic_map(4.0))
    assert verdict.regime == "chaotic"
    assert abs(verdict.evidence["max_lyapunov"] - math.log(2)) < 4 * float(lyap.stderr[0]) + 0.01
    assert verdict.evidence["exponent_sign"] == "positive" and verdict.evidence["period"] == 0
    assert verdict.evidence["steps_decay"] is False and verdict.evidence["norm_growth"] < 1.01  # x stays in [0, 1]
    assert "bounded" in verdict.reason
    _assert_plain_json(verdict)


def test_linear_contraction_is_converging():
    m = jacobiscope.systems.linear_map(torch.diag(torch.tensor([0.5, 0.3], dtype=torch.float64)))
    verdict, _ = _classify(m)
    assert verdict.regime == "converging"
    assert abs(verdict.evidence["max_lyapunov"] - math.log(0.5)) < 1e-12
    assert verdict.evidence["steps_decay"] is True
    assert abs(verdict.evidence["step_log_rate"] - math.log(0.5)) < 1e-9  # steps shrink like 0.5^t
    _assert_plain_json(verdict)


def test_logistic_r32_period_two_orbit_is_oscillating():
    verdict, _ = _classify(jacobiscope.systems.logistic_map(3.2))
    assert verdict.regime == "oscillating"
    assert verdict.evidence["period"] == 2
    # The 2-cycle's multiplier is 4 + 2r - r^2 = 0.16, so lambda = ln(0.16) / 2 per loop.
    assert abs(verdict.evidence["max_lyapunov"] - 0.5 * math.log(0.16)) < 1e-6
    assert verdict.evidence["steps_decay"] is False and verdict.evidence["step_decay_ratio"] > 0.5
    assert "period 2" in verdict.reason
    # Period 4 past the next period doubling (r = 3.5).
    assert _classify(jacobiscope.systems.logistic_map(3.5))[0].evidence["period"] == 4


def test_irrational_rotation_is_critical_rational_rotation_oscillating():
    golden = math.pi * (math.sqrt(5) - 1)  # 2 pi / phi: the angle worst approximated by a period
    oscillation = jacobiscope.oscillation_measures(torch.linalg.eigvals(_rotation(golden)))
    m = jacobiscope.systems.linear_map(_rotation(golden))
    lyap = jacobiscope.lyapunov_spectrum(m, m.x0, steps=200, k=1)
    verdict = classify_dynamics(max_lyapunov=lyap.exponents[0], max_lyapunov_stderr=lyap.stderr[0],
                                states=m.trajectory(m.x0, steps=200), oscillation=oscillation)
    assert verdict.regime == "critical"
    assert abs(verdict.evidence["max_lyapunov"]) < 1e-12 and verdict.evidence["period"] == 0
    assert verdict.evidence["steps_decay"] is False
    assert verdict.evidence["period_residual"] > 0.05  # its closest return (p = 13) misses by ~11% of a step
    assert abs(verdict.evidence["spectral_radius"] - 1.0) < 1e-12
    assert abs(verdict.evidence["max_rotation_angle"] - (2 * math.pi - golden)) < 1e-12
    _assert_plain_json(verdict)

    rational, _ = _classify(jacobiscope.systems.linear_map(_rotation(2 * math.pi / 5)), transient=0)
    assert rational.regime == "oscillating" and rational.evidence["period"] == 5
    # Without states there is no period to find: the same exponent and steps are critical.
    states = jacobiscope.systems.linear_map(_rotation(2 * math.pi / 5)).trajectory(steps=50)
    blind = classify_dynamics(max_lyapunov=0.0, step_sizes=(states[1:] - states[:-1]).norm(dim=-1))
    assert blind.regime == "critical" and "no states" in blind.reason


def test_overflowing_map_is_diverging():
    m = jacobiscope.LoopedMap(lambda x: x * x + 1.0, x0=torch.tensor([2.0], dtype=torch.float64), name="square")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jacobiscope.NonFiniteWarning)
        verdict, lyap = _classify(m, steps=30, transient=0, length=30)
    assert verdict.regime == "diverging"
    assert verdict.evidence["nonfinite_step"] == int(lyap.nonfinite_step) == 10  # 2, 5, 26, ... 1.6e181, inf
    assert "loop 10" in verdict.reason


def test_steady_exponential_growth_is_diverging_before_any_overflow():
    m = jacobiscope.systems.linear_map(1.2 * torch.eye(2, dtype=torch.float64))
    verdict, _ = _classify(m, steps=60, transient=0, length=60)
    assert verdict.regime == "diverging"  # not "chaotic", although lambda = ln 1.2 > 0
    assert abs(verdict.evidence["norm_log_rate"] - math.log(1.2)) < 1e-12
    assert verdict.evidence["norm_rising_fraction"] == 1.0
    # The norm-ratio rule alone, from norms only.
    norms = 1.5 ** torch.arange(60, dtype=torch.float64)
    by_ratio = classify_dynamics(max_lyapunov=0.4, state_norms=norms, tol=1.0)  # rate 0.405 < tol: ratio rule only
    assert by_ratio.regime == "diverging" and "grew" in by_ratio.reason
    assert abs(by_ratio.evidence["norm_growth"] - 1.5**30) < 1e-6 * 1.5**30


def test_significance_and_exponent_only_verdicts():
    # Positive but within 2 stderr of zero: critical, not chaotic.
    assert classify_dynamics(max_lyapunov=0.05, max_lyapunov_stderr=0.03).regime == "critical"
    assert classify_dynamics(max_lyapunov=0.05, max_lyapunov_stderr=0.01).regime == "chaotic"
    assert classify_dynamics(max_lyapunov=-0.05, max_lyapunov_stderr=0.03).regime == "critical"
    no_steps = classify_dynamics(max_lyapunov=-0.5)
    assert no_steps.regime == "converging" and "exponent alone" in no_steps.reason
    assert classify_dynamics(max_lyapunov=0.005).regime == "critical"
    assert classify_dynamics(max_lyapunov=0.005, tol=0.001).regime == "chaotic"
    assert classify_dynamics(max_lyapunov=float("nan")).regime == "diverging"
    assert classify_dynamics(max_lyapunov=-math.inf, step_sizes=[1.0, 0.0, 0.0, 0.0]).regime == "converging"
    # Negative exponent and persistent steps without states: oscillating, period unknown.
    persistent = classify_dynamics(max_lyapunov=-0.3, step_sizes=torch.ones(40))
    assert persistent.regime == "oscillating" and persistent.evidence["period"] == 0
    assert isinstance(persistent, RegimeVerdict) and persistent.regime in REGIMES


def test_batches_and_bad_arguments_are_refused_with_a_fix():
    lyap = jacobiscope.lyapunov_spectrum(jacobiscope.systems.logistic_map(4.0, batch=3), steps=20)
    with pytest.raises(ArgumentError, match="one trajectory"):
        classify_dynamics(max_lyapunov=lyap.exponents)
    verdict = classify_dynamics(max_lyapunov=lyap.exponents[1, 0], max_lyapunov_stderr=lyap.stderr[1, 0],
                                nonfinite_step=lyap.nonfinite_step[1])
    assert verdict.regime in REGIMES
    with pytest.raises(ArgumentError, match="1-D series"):
        classify_dynamics(max_lyapunov=0.0, step_sizes=torch.ones(10, 3))
    with pytest.raises(ArgumentError, match="nonfinite_step"):
        classify_dynamics(max_lyapunov=0.0, nonfinite_step=lyap.nonfinite_step)
    with pytest.raises(ArgumentError, match="tol"):
        classify_dynamics(max_lyapunov=0.0, tol=-1.0)
    with pytest.raises(ArgumentError, match="states"):
        classify_dynamics(max_lyapunov=0.0, states=torch.ones(1, 3))
