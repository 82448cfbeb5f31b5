import math

import torch

import jacobiscope


def test_scaled_rotation_block_and_real_modes():
    angle = 0.3
    rotation = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64)
    A = torch.zeros(4, 4, dtype=torch.float64)
    A[:2, :2] = 1.1 * rotation
    A[2, 2], A[3, 3] = -0.5, 0.9
    measures = jacobiscope.oscillation_measures(torch.linalg.eigvals(A))
    assert abs(float(measures.spectral_radius) - 1.1) < 1e-12
    assert float(measures.complex_fraction) == 0.5
    assert abs(float(measures.max_imag) - 1.1 * math.sin(angle)) < 1e-12
    assert abs(float(measures.max_rotation_angle) - angle) < 1e-12
    assert abs(float(measures.mean_rotation_angle) - angle) < 1e-12
    assert float(measures.outside_unit_circle_fraction) == 0.5  # the rotating pair, |1.1| > 1
    assert measures.count == 4


def test_real_spectrum_has_no_oscillation_and_batches():
    values = torch.tensor([[0.5, -0.2, 1.5], [0.1, 0.2, 0.3]], dtype=torch.float64)
    measures = jacobiscope.oscillation_measures(values)
    assert measures.complex_fraction.tolist() == [0.0, 0.0]
    assert measures.max_rotation_angle.tolist() == [0.0, 0.0]
    assert measures.outside_unit_circle_fraction.tolist() == [1 / 3, 0.0]
    assert measures.spectral_radius.tolist() == [1.5, 0.3]


def test_measures_from_an_eigen_result_and_as_dict(attention_map64):
    result = jacobiscope.jacobian_eigenvalues(attention_map64)
    measures = result.oscillation()
    eigenvalues = result.values
    assert float(measures.spectral_radius) == float(eigenvalues.abs().max())
    expected_fraction = float((eigenvalues.imag.abs() > 1e-6 * eigenvalues.abs().clamp_min(1)).double().mean())
    assert float(measures.complex_fraction) == expected_fraction
    record = measures.as_dict()
    assert isinstance(record["spectral_radius"], float) and len(record["rotation_angles"]) == 40
