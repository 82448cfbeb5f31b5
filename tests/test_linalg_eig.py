import pytest
import torch

import jacobiscope
from jacobiscope import ArgumentError, MemoryBudgetError


def _top_k(values, k):
    order = torch.argsort(values.abs(), descending=True, stable=True)
    return values[order][:k]


def _match(found, expected, atol):
    """Each expected eigenvalue has a found one within atol (order within conjugate pairs is free)."""
    distances = (found.unsqueeze(0) - expected.unsqueeze(1)).abs().min(1).values
    return bool((distances <= atol).all())


def test_dense_eigenvalues_match_eigvals_of_autograd_jacobian(attention_map64):
    from conftest import autograd_jacobian

    m = attention_map64
    expected = torch.linalg.eigvals(autograd_jacobian(m.step, m.x0))
    result = jacobiscope.jacobian_eigenvalues(m)
    assert result.method == "dense" and result.values.shape == (40,)
    assert _match(result.values, expected, 1e-10)
    assert torch.all(result.values.abs()[:-1] >= result.values.abs()[1:] - 1e-12)  # sorted by modulus


def test_arnoldi_top_k_matches_dense_top_k(attention_map64):
    dense = jacobiscope.jacobian_eigenvalues(attention_map64)
    arnoldi = jacobiscope.jacobian_eigenvalues(attention_map64, k=6, method="arnoldi")
    assert arnoldi.method == "arnoldi" and arnoldi.converged
    assert _match(arnoldi.values, dense.values[:6], 1e-8)
    assert torch.all(arnoldi.residuals < 1e-8)


def test_arnoldi_on_a_large_nonnormal_linear_map_with_complex_pairs():
    generator = torch.Generator().manual_seed(7)
    # A bulk of radius ~0.5 plus six planted outliers: 1 +- 0.6i, -1.3, 0.8, -0.7 +- 0.3i
    planted = torch.zeros(6, 6, dtype=torch.float64)
    planted[:2, :2] = torch.tensor([[1.0, -0.6], [0.6, 1.0]])
    planted[2, 2], planted[3, 3] = -1.3, 0.8
    planted[4:, 4:] = torch.tensor([[-0.7, -0.3], [0.3, -0.7]])
    basis, _ = torch.linalg.qr(torch.randn(300, 300, generator=generator, dtype=torch.float64))
    A = 0.5 * torch.randn(300, 300, generator=generator, dtype=torch.float64) / 300 ** 0.5
    A[:6, :6] += planted
    A = basis @ A @ basis.T
    expected = _top_k(torch.linalg.eigvals(A), 6)
    result = jacobiscope.jacobian_eigenvalues(jacobiscope.systems.linear_map(A), k=6)  # auto: D=300 <= dense limit
    assert result.method == "dense" and _match(result.values, expected, 1e-10)
    result = jacobiscope.jacobian_eigenvalues(jacobiscope.systems.linear_map(A), k=6, method="arnoldi")
    assert result.converged and _match(result.values, expected, 1e-8)
    assert result.matvecs < 300  # far fewer products than forming the 300 x 300 Jacobian


def test_batched_arnoldi_one_row_per_trajectory():
    m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, batch=2, seed=9, dtype=torch.float64)
    dense = jacobiscope.jacobian_eigenvalues(m)
    arnoldi = jacobiscope.jacobian_eigenvalues(m, k=4, method="arnoldi")
    assert arnoldi.values.shape == (2, 4)
    for b in range(2):
        assert _match(arnoldi.values[b], dense.values[b, :4], 1e-8)


def test_bad_k_and_budget_are_refused(attention_map64):
    with pytest.raises(ArgumentError, match="k=41 is larger than the state size D=40"):
        jacobiscope.jacobian_eigenvalues(attention_map64, k=41)
    with pytest.raises(ArgumentError, match="pass k="):
        jacobiscope.jacobian_eigenvalues(attention_map64, method="arnoldi")
    with pytest.raises(MemoryBudgetError, match="over the budget"):
        jacobiscope.jacobian_eigenvalues(attention_map64, max_bytes=100)
