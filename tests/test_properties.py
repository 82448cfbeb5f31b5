"""Property tests (hypothesis): the engine agrees with dense autograd over shapes, batch dims and dtypes."""
import math

import torch
from hypothesis import given, settings, strategies as st

import jacobiscope

shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)
batch_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
dtypes = st.sampled_from([torch.float32, torch.float64])


def _random_map(state_shape, batch_dims, dtype, seed):
    """F(x) = tanh(W vec(x) + b) per trajectory: a smooth, non-linear, shape-preserving map."""
    size = math.prod(state_shape)
    generator = torch.Generator().manual_seed(seed)
    W = (1.5 * torch.randn(size, size, generator=generator, dtype=torch.float64) / math.sqrt(size)).to(dtype)
    b = torch.randn(size, generator=generator, dtype=torch.float64).to(dtype)

    def step(x):
        flat = x.reshape(*x.shape[:batch_dims], size)
        return torch.tanh(flat @ W.T + b).reshape(x.shape)

    return jacobiscope.LoopedMap(step, batch_dims=batch_dims), W, b


def _reference_jacobian(W, b, x_flat):
    return (1 - torch.tanh(W @ x_flat + b) ** 2).unsqueeze(1) * W


@settings(max_examples=25, deadline=None, derandomize=True)
@given(state_shape=shapes, batch_shape=batch_shapes, dtype=dtypes, seed=st.integers(0, 1000))
def test_dense_and_matrix_free_products_agree(state_shape, batch_shape, dtype, seed):
    m, W, b = _random_map(state_shape, len(batch_shape), dtype, seed)
    x = torch.randn((*batch_shape, *state_shape), generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64).to(dtype)
    size = math.prod(state_shape)
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    J = jacobiscope.jacobian(m, x, chunk_size=2)
    assert J.shape == (*batch_shape, size, size)
    flat_x = x.reshape(-1, size)
    flat_J = J.reshape(-1, size, size)
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed + 2), dtype=torch.float64).to(dtype)
    Jv = jacobiscope.linalg.jvp(m, x, v).reshape(-1, size)
    for i in range(flat_x.shape[0]):
        expected = _reference_jacobian(W, b, flat_x[i])
        assert torch.allclose(flat_J[i], expected, atol=tolerance, rtol=tolerance)
        assert torch.allclose(Jv[i], expected @ v.reshape(-1, size)[i], atol=10 * tolerance, rtol=10 * tolerance)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(state_shape=shapes, batch_shape=batch_shapes, dtype=dtypes, seed=st.integers(0, 1000))
def test_spectral_norm_and_lyapunov_shapes_and_values(state_shape, batch_shape, dtype, seed):
    m, W, b = _random_map(state_shape, len(batch_shape), dtype, seed)
    x = torch.randn((*batch_shape, *state_shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)
    size = math.prod(state_shape)
    sigma = jacobiscope.spectral_norm(m, x)
    assert sigma.value.shape == batch_shape
    expected = torch.linalg.matrix_norm(jacobiscope.jacobian(m, x).double(), 2)
    assert torch.allclose(sigma.value.double(), expected, rtol=1e-4 if dtype == torch.float32 else 1e-9)
    k = min(2, size)
    result = jacobiscope.lyapunov_spectrum(m, x, steps=6, k=k)
    assert result.exponents.shape == (*batch_shape, k)
    assert result.history.shape == (6, *batch_shape, k)
    assert result.exponents.dtype == dtype and result.final_state.shape == x.shape
    assert torch.all(result.exponents[..., :-1] >= result.exponents[..., 1:])
    # full spectrum: the sum rule holds exactly on every orbit (1 step: log|det J(x0)|)
    full = jacobiscope.lyapunov_spectrum(m, x, steps=1, k=size)
    log_det = torch.linalg.slogdet(jacobiscope.jacobian(m, x).double())[1]
    # float32 resolves singular values only down to ~1e-7 of the largest: check well-conditioned Jacobians there
    error = (full.exponents.double().sum(-1) - log_det).abs()
    if dtype == torch.float64:
        assert torch.all(error <= 1e-9 * (1 + log_det.abs()))
    else:
        conditioned = log_det > -8.0
        assert torch.all(error[conditioned] <= 2e-3 * (1 + log_det.abs()[conditioned]))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(size=st.sampled_from([2, 3, 5, 70]), zeros=st.integers(0, 2), seed=st.integers(0, 1000))
def test_triangular_maps_have_the_log_moduli_of_their_diagonal_as_exponents(size, zeros, seed):
    """A triangular A has eigenvalues diag(A): its exponents are log|a_ii| (log-moduli 0.2 apart, the largest 0, so
    the frame aligns within the transient and the state neither overflows nor underflows), and -inf, or a rounding
    residue far below every real rate, for each exact zero on it — on the dense loop (size <= 64) and on the jvp
    loop, with the frame kept orthonormal."""
    generator = torch.Generator().manual_seed(seed)
    log_moduli = -0.2 * torch.randperm(size, generator=generator).to(torch.float64)
    signs = torch.where(torch.rand(size, generator=generator) < 0.5, -1.0, 1.0).to(torch.float64)
    diagonal = log_moduli.exp() * signs
    diagonal[torch.randperm(size, generator=generator)[:min(zeros, size - 1)]] = 0.0
    A = torch.triu(0.3 * torch.randn(size, size, generator=generator, dtype=torch.float64), 1) + torch.diag(diagonal)
    k = min(size, 4)
    result = jacobiscope.lyapunov_spectrum(jacobiscope.systems.linear_map(A), torch.ones(size, dtype=torch.float64),
                                           steps=200, k=k, transient=150)
    expected = diagonal.abs().log().sort(descending=True).values[:k]
    finite = torch.isfinite(expected)
    assert torch.allclose(result.exponents[finite], expected[finite], atol=1e-6)
    slowest = -0.2 * (size - 1)   # the most contracting real rate of these maps
    assert bool((result.exponents[~finite] < slowest - 15).all())
    frame = result.final_tangents.reshape(k, -1)
    assert torch.allclose(frame @ frame.T, torch.eye(k, dtype=torch.float64), atol=1e-10)
