import pytest
import torch
import torch.nn.functional as F
from torch import nn

import jacobiscope
from jacobiscope.errors import StepError
from jacobiscope.linalg import JacobianOperator, jacobian_matmat, jvp, vjp

from conftest import autograd_jacobian


def test_jvp_vjp_matmat_match_dense_autograd(attention_map64):
    m = attention_map64
    x = m.x0
    J = autograd_jacobian(m.step, x)
    generator = torch.Generator().manual_seed(0)
    v = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    u = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    V = torch.randn(6, *x.shape, generator=generator, dtype=x.dtype)
    assert torch.allclose(jvp(m, x, v).reshape(-1), J @ v.reshape(-1), atol=1e-12, rtol=1e-8)
    assert torch.allclose(vjp(m, x, u).reshape(-1), J.T @ u.reshape(-1), atol=1e-12, rtol=1e-8)
    JV = jacobian_matmat(m, x, V).reshape(6, -1)
    assert torch.allclose(JV, V.reshape(6, -1) @ J.T, atol=1e-12, rtol=1e-8)
    op = JacobianOperator(m, x)
    assert torch.allclose(op.rmatmat(V).reshape(6, -1), V.reshape(6, -1) @ J, atol=1e-12, rtol=1e-8)
    assert torch.allclose(op.output, m(x))


def test_jvp_matches_central_finite_differences(attention_map64):
    m = attention_map64
    x = m.x0
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    h = 1e-5
    finite_difference = (m(x + h * v) - m(x - h * v)) / (2 * h)
    assert torch.allclose(jvp(m, x, v), finite_difference, atol=1e-8, rtol=1e-7)


def test_batched_products_apply_each_trajectorys_own_jacobian():
    m = jacobiscope.systems.self_attention_map(tokens=3, dim=4, heads=2, batch=3, seed=2, dtype=torch.float64)
    x = m.x0
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=x.dtype)
    result = jvp(m, x, v)
    for b in range(3):
        J_b = autograd_jacobian(lambda y: m(y.unsqueeze(0))[0], x[b])
        assert torch.allclose(result[b].reshape(-1), J_b @ v[b].reshape(-1), atol=1e-12)


def test_operator_checks_vector_shapes(attention_map64):
    op = JacobianOperator(attention_map64, attention_map64.x0)
    with pytest.raises(ValueError, match=r"v must have shape \(5, 8\)"):
        op.matvec(torch.ones(40, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"V must have shape \[k, 5, 8\]"):
        op.matmat(torch.ones(5, 8, dtype=torch.float64))


class _FusedAttention(nn.Module):
    """Attention through F.scaled_dot_product_attention with 4-D inputs, as Hugging Face models call it."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return torch.tanh(x + out.transpose(1, 2).reshape(b, n, d))


def test_forward_ad_runs_through_fused_sdpa_via_math_backend():
    torch.manual_seed(0)
    module = _FusedAttention().double().eval()
    m = jacobiscope.LoopedMap(module, batch_dims=1)
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    v = torch.randn_like(x)
    J = autograd_jacobian(lambda y: module(y.unsqueeze(0))[0], x[0])
    assert torch.allclose(jvp(m, x, v).reshape(-1), J @ v.reshape(-1), atol=1e-12)
    result = jacobiscope.lyapunov_spectrum(m, x, steps=5, k=3)
    assert torch.isfinite(result.exponents).all()


def test_random_step_under_vmap_gets_a_clear_message():
    module = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    with pytest.warns(RuntimeWarning):
        m = jacobiscope.LoopedMap(module)
    with pytest.raises(StepError, match=r"draws random numbers.*model.eval\(\)"):
        jacobian_matmat(m, torch.ones(4), torch.eye(4))
