import pytest
import torch

import jacobiscope
from jacobiscope import MemoryBudgetError

from conftest import autograd_jacobian


@pytest.mark.parametrize("method", ["rev", "fwd"])
@pytest.mark.parametrize("chunk_size", [7, 256])
def test_dense_jacobian_matches_autograd(attention_map64, method, chunk_size):
    m = attention_map64
    expected = autograd_jacobian(m.step, m.x0)
    J = jacobiscope.jacobian(m, m.x0, method=method, chunk_size=chunk_size)
    assert J.shape == (40, 40)
    assert torch.allclose(J, expected, atol=1e-13, rtol=1e-10)
    assert not J.requires_grad


def test_batched_dense_jacobian_is_per_trajectory_blocks():
    m = jacobiscope.systems.self_attention_map(tokens=3, dim=4, heads=2, batch=2, seed=5, dtype=torch.float64)
    J = jacobiscope.jacobian(m, m.x0, chunk_size=5)
    assert J.shape == (2, 12, 12)
    for b in range(2):
        expected = autograd_jacobian(lambda y: m(y.unsqueeze(0))[0], m.x0[b])
        assert torch.allclose(J[b], expected, atol=1e-13)


def test_linear_map_jacobian_is_the_matrix():
    A = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    m = jacobiscope.systems.linear_map(A)
    assert torch.allclose(jacobiscope.jacobian(m), A, atol=1e-15)


def test_over_budget_refuses_with_required_size():
    m = jacobiscope.systems.self_attention_map(tokens=16, dim=32, heads=4)  # D = 512: 1 MiB in float32
    with pytest.raises(MemoryBudgetError, match=r"512 x 512 float32 = 1.0 MiB, over the budget of 1.0 KiB.*max_bytes=1048576") as caught:
        jacobiscope.jacobian(m, m.x0, max_bytes=1024)
    assert caught.value.required_bytes == 512 * 512 * 4
    J = jacobiscope.jacobian(m, m.x0, max_bytes=2 * 1024 * 1024)  # raising the budget works
    assert J.shape == (512, 512)


def test_unknown_method_is_refused(attention_map64):
    with pytest.raises(ValueError, match="method must be 'rev' or 'fwd'"):
        jacobiscope.jacobian(attention_map64, method="central")
