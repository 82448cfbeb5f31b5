import math

import pytest
import torch

import jacobiscope
from jacobiscope import ArgumentError, NonFiniteWarning, StateError
from jacobiscope.systems import henon_map, linear_map, logistic_map


def _rotation(angle):
    return torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64)


def test_linear_map_exponents_are_log_moduli_of_eigenvalues():
    # A = P diag-blocks(1.2 Rot(0.3), 0.9, 0.5) P^-1 with a non-orthogonal P: non-normal, with a complex pair.
    blocks = torch.zeros(4, 4, dtype=torch.float64)
    blocks[:2, :2] = 1.2 * _rotation(0.3)
    blocks[2, 2], blocks[3, 3] = 0.9, 0.5
    P = torch.eye(4, dtype=torch.float64) + 0.4 * torch.randn(4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    A = P @ blocks @ torch.linalg.inv(P)
    expected = torch.log(torch.linalg.eigvals(A).abs()).sort(descending=True).values
    result = jacobiscope.lyapunov_spectrum(linear_map(A), steps=400, k=4, transient=300)
    # A conjugate pair's two exponents converge only on average (the frame rotates inside its plane): their sum
    # is exact, each of them to O(1/steps).
    assert torch.allclose(result.exponents[2:], expected[2:], atol=1e-6)
    assert abs(float(result.exponents[:2].sum() - expected[:2].sum())) < 1e-6
    assert torch.allclose(result.exponents[:2], expected[:2], atol=5e-3)


def test_linear_map_with_distinct_moduli_to_1e6():
    A = torch.tensor([[1.1, 0.7, 0.0], [0.0, 0.8, 0.3], [0.0, 0.0, -0.4]], dtype=torch.float64)
    result = jacobiscope.lyapunov_spectrum(linear_map(A), steps=200, k=3, transient=200)
    expected = torch.log(torch.tensor([1.1, 0.8, 0.4], dtype=torch.float64))
    assert torch.allclose(result.exponents, expected, atol=1e-6)
    # fewer exponents than the dimension: the top ones
    top = jacobiscope.lyapunov_spectrum(linear_map(A), steps=200, k=2, transient=200)
    assert torch.allclose(top.exponents, expected[:2], atol=1e-6)


def test_logistic_map_r4_is_ln2():
    result = jacobiscope.lyapunov_spectrum(logistic_map(4.0, batch=2000, seed=1), steps=2000, transient=20)
    assert result.exponents.shape == (2000, 1)
    assert not result.flagged
    assert abs(float(result.exponents.mean()) - math.log(2)) < 1e-3


def test_henon_exponents_sum_rule_and_kaplan_yorke():
    result = jacobiscope.lyapunov_spectrum(henon_map(batch=64, seed=0), steps=4000, k=2, transient=100)
    mean = result.exponents.mean(0)
    assert abs(float(mean[0]) - 0.4192) < 2e-3
    assert abs(float(mean[1]) - (-1.6232)) < 2e-3
    # |det J| = b everywhere: the sum is ln 0.3 for every trajectory, to rounding
    assert torch.allclose(result.exponents.sum(1), torch.full((64,), math.log(0.3), dtype=torch.float64), atol=1e-6)
    assert abs(float(result.kaplan_yorke.mean()) - 1.2583) < 2e-3


def test_two_trajectory_estimate_agrees_with_qr():
    qr = jacobiscope.lyapunov_spectrum(henon_map(batch=64, seed=2), steps=3000, transient=100)
    two = jacobiscope.lyapunov_spectrum(henon_map(batch=64, seed=2), steps=3000, transient=100, method="two_trajectory")
    assert two.method == "two_trajectory" and two.final_tangents is None
    assert abs(float(qr.exponents.mean()) - float(two.exponents.mean())) < 5e-3
    assert abs(float(two.exponents.mean()) - 0.4192) < 5e-3


def test_sum_of_all_exponents_is_mean_log_det_along_the_orbit(attention_map64):
    m = attention_map64
    steps, transient = 30, 5
    result = jacobiscope.lyapunov_spectrum(m, m.x0, steps=steps, k=40, transient=transient)
    x = m.x0
    log_dets = []
    with torch.no_grad():
        for t in range(transient + steps):
            if t >= transient:
                log_dets.append(torch.linalg.slogdet(jacobiscope.jacobian(m, x))[1])
            x = m(x)
    assert abs(float(result.exponents.sum()) - float(torch.stack(log_dets).mean())) < 1e-8
    assert torch.allclose(result.final_state, x, atol=1e-12)


def test_matrix_free_top_k_matches_dense_jacobian_qr(attention_map64):
    m = attention_map64
    k, steps = 5, 25
    generator = torch.Generator().manual_seed(11)
    frame = torch.linalg.qr(torch.randn(40, k, generator=generator, dtype=torch.float64))[0]
    result = jacobiscope.lyapunov_spectrum(m, m.x0, steps=steps, k=k, tangents=frame.T.reshape(k, 5, 8))
    # independent reference: dense autograd Jacobians and an explicit QR
    Q, x, total = frame, m.x0, torch.zeros(k, dtype=torch.float64)
    for _ in range(steps):
        J = torch.autograd.functional.jacobian(m.step, x).reshape(40, 40)
        Q, R = torch.linalg.qr(J @ Q)
        total += R.diagonal().abs().log()
        Q = Q * torch.sign(R.diagonal())
        x = m(x).detach()
    expected = (total / steps).sort(descending=True).values
    assert torch.allclose(result.exponents, expected, atol=1e-10)


def test_history_finite_time_and_stderr_are_consistent():
    result = jacobiscope.lyapunov_spectrum(henon_map(), steps=500, k=2, transient=10)
    assert result.history.shape == (500, 2) and result.finite_time.shape == (500, 2)
    assert torch.equal(result.history_steps, torch.arange(1, 501))
    assert torch.allclose(result.history[-1], result.exponents)
    assert torch.allclose(result.finite_time.mean(0), result.exponents, atol=1e-12)
    assert torch.allclose(result.history[9], result.finite_time[:10].mean(0))
    assert torch.all(result.stderr > 0) and torch.all(result.stderr < 0.1)
    assert abs(float(result.exponents[0]) - 0.4192) < 5 * float(result.stderr[0]) + 1e-3


def test_reorthonormalizing_less_often_gives_the_same_exponents():
    A = torch.tensor([[1.1, 0.7, 0.0], [0.0, 0.8, 0.3], [0.0, 0.0, -0.4]], dtype=torch.float64)
    every = jacobiscope.lyapunov_spectrum(linear_map(A), steps=200, k=3, transient=200, reorth_every=1)
    sparse = jacobiscope.lyapunov_spectrum(linear_map(A), steps=200, k=3, transient=200, reorth_every=5)
    assert sparse.history.shape[0] == 40 and torch.equal(sparse.history_steps[:2], torch.tensor([5, 10]))
    assert torch.allclose(every.exponents, sparse.exponents, atol=1e-9)


def test_batched_spectrum_equals_individual_runs():
    m = jacobiscope.systems.self_attention_map(tokens=3, dim=4, heads=2, batch=3, seed=6, dtype=torch.float64)
    frames = torch.linalg.qr(torch.randn(3, 12, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64))[0]
    tangents = frames.permute(2, 0, 1).reshape(2, 3, 3, 4)
    batched = jacobiscope.lyapunov_spectrum(m, m.x0, steps=20, k=2, tangents=tangents)
    for b in range(3):
        single = jacobiscope.lyapunov_spectrum(
            m, m.x0[b : b + 1], steps=20, k=2, tangents=tangents[:, b : b + 1]
        )
        assert torch.allclose(batched.exponents[b], single.exponents[0], atol=1e-12)


def test_float64_mode_casts_a_float32_map():
    m32 = jacobiscope.systems.self_attention_map(tokens=4, dim=8, heads=2, seed=1)
    result = jacobiscope.lyapunov_spectrum(m32, m32.x0, steps=10, k=2, dtype=torch.float64)
    assert result.exponents.dtype == torch.float64 and result.meta["dtype"] == "torch.float64"
    low = jacobiscope.lyapunov_spectrum(m32, m32.x0, steps=10, k=2)
    assert torch.allclose(low.exponents.double(), result.exponents, atol=1e-4)


def test_nonfinite_trajectory_is_flagged_not_silently_averaged():
    # trajectory 0 is a contraction; trajectory 1 blows up (x -> x^2 from 1e10 overflows float64 at loop 5)
    first_row = torch.tensor([[True], [False]])
    m = jacobiscope.LoopedMap(lambda x: torch.where(first_row, 0.5 * x, x**2), batch_dims=1)
    x0 = torch.tensor([[1.0], [1e10]], dtype=torch.float64)
    with pytest.warns(NonFiniteWarning, match="1 of 2 trajectories.*first at loop 5"):
        result = jacobiscope.lyapunov_spectrum(m, x0, steps=20)
    assert result.nonfinite_step.tolist() == [-1, 5]
    assert abs(float(result.exponents[0, 0]) - math.log(0.5)) < 1e-12
    assert torch.isnan(result.exponents[1, 0])
    assert torch.isfinite(result.history[:3, 1]).all() and torch.isnan(result.history[-1, 1]).all()


def test_bad_arguments_are_clear_errors():
    m = henon_map()
    with pytest.raises(ArgumentError, match="k=3 tangent vectors cannot exceed the state size D=2"):
        jacobiscope.lyapunov_spectrum(m, steps=10, k=3)
    with pytest.raises(ArgumentError, match="steps must be a positive int, got 0"):
        jacobiscope.lyapunov_spectrum(m, steps=0)
    with pytest.raises(StateError, match="floating dtype"):
        jacobiscope.lyapunov_spectrum(jacobiscope.LoopedMap(lambda x: x), torch.ones(2, dtype=torch.int64), steps=3)
    with pytest.raises(StateError, match="got torch.bfloat16"):
        jacobiscope.lyapunov_spectrum(jacobiscope.LoopedMap(lambda x: x), torch.ones(2, dtype=torch.bfloat16), steps=3)
    with pytest.raises(ArgumentError, match="two_trajectory' estimates the largest exponent only"):
        jacobiscope.lyapunov_spectrum(m, steps=3, k=2, method="two_trajectory")
    with pytest.raises(ArgumentError, match=r"tangents must have shape \[2, 2\]"):
        jacobiscope.lyapunov_spectrum(m, steps=3, k=2, tangents=torch.ones(3))


def test_kaplan_yorke_dimension_cases():
    kaplan_yorke = jacobiscope.kaplan_yorke_dimension
    assert float(kaplan_yorke(torch.tensor([-0.1, -0.5]))) == 0.0
    assert abs(float(kaplan_yorke(torch.tensor([0.5, -0.25, -1.0]))) - 2.25) < 1e-12
    assert math.isnan(float(kaplan_yorke(torch.tensor([0.5, 0.1]))))  # only k < D computed, still positive
    assert float(kaplan_yorke(torch.tensor([0.5, 0.1]), state_size=2)) == 2.0


@pytest.mark.slow   # ~10 s: torch.compile's first compilation; keeps the default suite under 5 min on 2 cores
def test_compiled_tangent_propagation_equals_eager(attention_map64):
    m = attention_map64
    for k in (1, 3):
        eager = jacobiscope.lyapunov_spectrum(m, m.x0, steps=12, k=k)
        compiled = jacobiscope.lyapunov_spectrum(m, m.x0, steps=12, k=k, compile=True)
        assert torch.allclose(compiled.exponents, eager.exponents, atol=1e-10)
        assert torch.allclose(compiled.final_state, eager.final_state, atol=1e-12)


@pytest.mark.parametrize("size", [3, 100])  # the dense loop (a tiny state) and the jvp loop
def test_singular_jacobian_gives_exponents_of_minus_infinity(size):
    # diag(0.5, 0.25, 0, ...): exponents log 0.5, log 0.25, then -inf exactly (the product of Jacobians has rank 2);
    # 0 / 0 in the frame once gave NaN for all of them and a "diverging" verdict
    A = torch.zeros(size, size, dtype=torch.float64)
    A[0, 0], A[1, 1] = 0.5, 0.25
    result = jacobiscope.lyapunov_spectrum(linear_map(A), torch.ones(size, dtype=torch.float64), steps=60, k=3,
                                           transient=5)
    assert torch.allclose(result.exponents[:2], torch.log(torch.tensor([0.5, 0.25], dtype=torch.float64)),
                          atol=1e-9)
    if size > 64:  # Householder QR on the jvp loop finds the collapsed column exactly: R_33 = 0
        assert result.exponents[2] == -math.inf and result.stderr[2] == 0
    else:  # Gram-Schmidt on the dense loop keeps a rounding residual: numerically -inf, far below any real rate
        assert result.exponents[2] < 2 * math.log(torch.finfo(torch.float64).eps)
    assert float(result.kaplan_yorke) == 0.0
    frame = result.final_tangents.reshape(3, -1)
    assert torch.allclose(frame @ frame.T, torch.eye(3, dtype=torch.float64), atol=1e-12)  # still orthonormal


@pytest.mark.parametrize("method,k", [("qr", 1), ("qr", 2), ("two_trajectory", 1)])
@pytest.mark.parametrize("size", [4, 100])
def test_constant_map_has_every_exponent_minus_infinity(method, k, size):
    constant = jacobiscope.LoopedMap(lambda x: torch.zeros_like(x) + 0.3, x0=torch.randn(size, dtype=torch.float64))
    result = jacobiscope.lyapunov_spectrum(constant, steps=8, k=k, method=method)
    assert result.exponents.tolist() == [-math.inf] * k and result.stderr.tolist() == [0.0] * k
    assert bool(torch.isfinite(result.final_state).all())


def test_measure_calls_a_constant_map_converging_without_flags():
    constant = jacobiscope.LoopedMap(lambda x: torch.zeros_like(x) + 0.3, x0=torch.randn(6, dtype=torch.float64))
    row = jacobiscope.measure(constant, loops=12)
    assert row.regime == "converging" and row.flags == []
    assert row.lyapunov["exponents"][0] == -math.inf and row.spectral_norm[0]["value"] == 0.0
    # the table says -inf with no interval around it, and the verdict line says why
    from jacobiscope.report import Report

    summary = Report([row], {"model": "constant"}, []).summary()
    assert " -inf  converging" in summary and "+/- 0" not in summary and "lambda_max = -inf" in summary


def test_regime_reads_minus_infinity_as_superstable():
    from jacobiscope.dynamics.regime import classify_dynamics

    assert classify_dynamics(max_lyapunov=-math.inf).regime == "converging"
    verdict = classify_dynamics(lyapunov_history=torch.tensor([-1.0, -math.inf, -math.inf]))
    assert verdict.regime == "converging" and "-inf (exact)" in verdict.evidence["reason"]
    assert classify_dynamics(lyapunov_history=torch.tensor([-1.0, math.nan, math.nan])).regime == "diverging"
    assert classify_dynamics(max_lyapunov=math.inf).regime == "diverging"
