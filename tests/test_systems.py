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
