import pytest
import torch

import jacobiscope
from jacobiscope import ConvergenceWarning, StateError


def test_spectral_norm_matches_dense_two_norm(attention_map64):
    m = attention_map64
    J = jacobiscope.jacobian(m)
    expected = torch.linalg.matrix_norm(J, 2)
    result = jacobiscope.spectral_norm(m)
    assert result.converged
    assert abs(float(result.value) - float(expected)) <= 1e-10 * float(expected)
    assert result.tolerance <= 1e-10
    assert result.iterations < 40  # Lanczos: far fewer than D=40 iterations would be a full basis anyway
    # the returned vectors are the top singular pair: J v = sigma u, J^T u = sigma v
    v, u = result.right_vector.reshape(-1), result.left_vector.reshape(-1)
    assert torch.allclose(J @ v, result.value * u, atol=1e-8)
    assert torch.allclose(J.T @ u, result.value * v, atol=1e-6)
    assert result.history.shape[0] == result.iterations


def test_power_method_agrees_with_lanczos(attention_map64):
    lanczos = jacobiscope.spectral_norm(attention_map64)
    power = jacobiscope.spectral_norm(attention_map64, method="power", tol=1e-12, max_iter=5000)
    assert abs(float(power.value) - float(lanczos.value)) <= 1e-8
    assert power.iterations > lanczos.iterations


def test_float32_spectral_norm_within_1e4_relative():
    m = jacobiscope.systems.self_attention_map(tokens=8, dim=16, heads=2, seed=1)
    expected = torch.linalg.matrix_norm(jacobiscope.jacobian(m.to(torch.float64)), 2)
    result = jacobiscope.spectral_norm(m)
    assert abs(float(result.value) - float(expected)) <= 1e-4 * float(expected)


def test_batched_spectral_norm_one_value_per_trajectory():
    m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, batch=3, seed=4, dtype=torch.float64)
    result = jacobiscope.spectral_norm(m)
    expected = torch.linalg.matrix_norm(jacobiscope.jacobian(m), 2)
    assert result.value.shape == (3,)
    assert torch.allclose(result.value, expected, rtol=1e-10)


def test_linear_map_analytic_value():
    A = torch.tensor([[3.0, 0.0], [4.0, 5.0]], dtype=torch.float64)  # singular values sqrt(45), sqrt(5)
    result = jacobiscope.spectral_norm(jacobiscope.systems.linear_map(A))
    assert abs(float(result.value) - 45 ** 0.5) < 1e-12


def test_iteration_cap_warns_and_reports_tolerance(attention_map64):
    with pytest.warns(ConvergenceWarning, match="stopped after 3 iterations"):
        result = jacobiscope.spectral_norm(attention_map64, max_iter=3)
    assert not result.converged and float(result.tolerance) > 1e-10


def test_half_precision_is_refused():
    m = jacobiscope.LoopedMap(lambda x: 2 * x)
    with pytest.raises(StateError, match="float32 or float64, got torch.float16"):
        jacobiscope.spectral_norm(m, torch.ones(3, dtype=torch.float16))
