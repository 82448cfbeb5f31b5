import math

import torch

import jacobiscope


def test_reference_maps_one_step_by_hand():
    assert float(jacobiscope.systems.logistic_map(3.0)(torch.tensor(0.5, dtype=torch.float64))) == 0.75
    henon = jacobiscope.systems.henon_map(1.4, 0.3)
    assert henon(torch.tensor([0.5, 0.2], dtype=torch.float64)).tolist() == [1 - 1.4 * 0.25 + 0.2, 0.3 * 0.5]


def test_self_attention_map_is_the_itrsa_form():
    m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=3, eta=0.7, injection=True, dtype=torch.float64)
    block, x = m.module, m.x0
    # independent computation of RMSNorm(X + eta (MSA(X) + C)) with per-head softmax attention
    q, k, v = block.query(x), block.key(x), block.value(x)
    heads = []
    for h in range(3):
        cols = slice(2 * h, 2 * h + 2)
        weights = torch.softmax(q[:, cols] @ k[:, cols].T / math.sqrt(2), dim=-1)
        heads.append(weights @ v[:, cols])
    msa = block.output(torch.cat(heads, dim=1))
    z = x + 0.7 * (msa + block.injection)
    expected = block.gain * z / torch.sqrt(z.pow(2).mean(-1, keepdim=True) + block.eps)
    assert torch.allclose(m(x), expected, atol=1e-12)
    # x0 has unit RMS per token
    assert torch.allclose(x.pow(2).mean(-1), torch.ones(4, dtype=torch.float64))


def test_normalization_bounds_the_jacobian_as_the_paper_proves():
    # ||dF/dX||_2 <= (max|gamma| / R) (1 + eta ||J_MSA||_2), R a lower bound of the pre-norm row RMS norms
    m = jacobiscope.systems.self_attention_map(tokens=6, dim=8, heads=2, eta=0.9, weight_scale=2.0, seed=4, dtype=torch.float64)
    x = m.x0
    block = m.module
    sigma = float(jacobiscope.spectral_norm(m, x).value)
    sigma_msa = float(jacobiscope.spectral_norm(jacobiscope.LoopedMap(block.attention), x).value)
    with torch.no_grad():
        pre_norm = x + block.eta * block.drive(x)
    R = float(pre_norm.pow(2).mean(-1).add(block.eps).sqrt().min())
    bound = float(block.gain.detach().abs().max()) / R * (1 + block.eta * sigma_msa)
    assert sigma <= bound


def test_linear_map_refuses_a_complex_matrix_and_a_mismatched_start_and_takes_integers():
    import pytest

    from jacobiscope.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"needs a real matrix, got torch.complex64 .* \[\[A.real, -A.imag\]"):
        jacobiscope.systems.linear_map(torch.eye(2, dtype=torch.cfloat))
    with pytest.raises(ArgumentError, match=r"x0 must be a tensor whose last dimension is the matrix's 2, got \(3,\)"):
        jacobiscope.systems.linear_map(torch.eye(2), x0=torch.ones(3))
    # the realification the message proposes: a complex A's exponents, each twice
    A = torch.tensor([[0.5 + 0.5j, 0.1], [0.0, 0.9j]], dtype=torch.complex128)
    real = torch.cat([torch.cat([A.real, -A.imag], 1), torch.cat([A.imag, A.real], 1)])
    result = jacobiscope.lyapunov_spectrum(jacobiscope.systems.linear_map(real), steps=300, k=4, transient=200)
    expected = sorted([math.log(abs(0.5 + 0.5j))] * 2 + [math.log(0.9)] * 2, reverse=True)
    assert result.exponents.tolist() == [pytest.approx(v, abs=1e-3) for v in expected]
    integers = jacobiscope.systems.linear_map(torch.tensor([[2, 0], [0, 1]]))
    assert integers.x0.dtype == torch.get_default_dtype() and integers(integers.x0).tolist() == [2.0, 1.0]
