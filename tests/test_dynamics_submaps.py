"""drive_map / without_norm: the same weights, against hand-written forwards of each kind of loop."""
import math

import pytest
import torch
import torch.nn.functional as F

import jacobiscope
from jacobiscope.errors import ArgumentError
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

from hf_models import tiny_inputs, tiny_model

PUZZLE = torch.zeros(2, 81, dtype=torch.long)
PUZZLE[0, [0, 10, 20]] = torch.tensor([1, 2, 3])
PUZZLE[1, [5, 50, 77]] = torch.tensor([9, 8, 7])


def multi_head_attention(x, Wq, Wk, Wv, Wo, heads, causal=False, biases=(None, None, None, None)):
    """softmax(Q K^T / sqrt(d_h)) V per head, then the output map: written out from the weights ([out, in])."""
    def project(W, b):
        y = x @ W.T
        return y + b if b is not None else y

    q, k, v = project(Wq, biases[0]), project(Wk, biases[1]), project(Wv, biases[2])
    head_dim = x.shape[-1] // heads
    mixed = []
    for h in range(heads):
        part = slice(h * head_dim, (h + 1) * head_dim)
        scores = q[..., part] @ k[..., part].transpose(-1, -2) / math.sqrt(head_dim)
        if causal:
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
        mixed.append(torch.softmax(scores, dim=-1) @ v[..., part])
    out = torch.cat(mixed, -1) @ Wo.T
    return out + biases[3] if biases[3] is not None else out


def test_self_attention_map():
    m = jacobiscope.systems.self_attention_map(tokens=5, dim=8, heads=2, eta=0.6, injection=True, batch=2, seed=1,
                                               dtype=torch.float64)
    block = m.module.requires_grad_(False)
    x = m.x0
    weights = (block.query.weight, block.key.weight, block.value.weight, block.output.weight)
    attention = multi_head_attention(x, *weights, 2)
    assert torch.allclose(jacobiscope.dynamics.drive_map(m)(x), attention + block.injection, atol=1e-13)
    assert torch.allclose(jacobiscope.dynamics.drive_map(m, part="attention")(x), attention, atol=1e-13)
    assert torch.allclose(jacobiscope.dynamics.drive_map(m, part="injection")(x), block.injection.expand_as(x))
    bare = jacobiscope.dynamics.without_norm(m)
    assert torch.allclose(bare(x), x + 0.6 * (attention + block.injection), atol=1e-13)
    rms = (x + 0.6 * (attention + block.injection)).pow(2).mean(-1, keepdim=True)
    assert torch.allclose(m(x), bare(x) / torch.sqrt(rms + block.eps), atol=1e-13)  # all the norm did
    assert jacobiscope.dynamics.drive_map(m).batch_dims == 1 and bare.state_shape == m.state_shape


def itrsa_injection(model, puzzles):
    cells = [(i // 9, i % 9, 3 * (i // 27) + (i % 9) // 3) for i in range(81)]
    position = torch.stack([model.row_embed.weight[r] + model.column_embed.weight[c] + model.box_embed.weight[b]
                            for r, c, b in cells])
    return model.embed.weight[puzzles] + position


@pytest.mark.parametrize("mlp_ratio", [0, 2])
def test_itrsa_loop(mlp_ratio):
    torch.manual_seed(0)
    model = ItrSAForSudoku(ItrSAConfig(hidden_size=8, num_heads=2, eta=0.4, mlp_ratio=mlp_ratio,
                                       initializer_range=0.3)).eval().double().requires_grad_(False)
    m = model.loop_map(PUZZLE)
    x = m.trajectory(m.x0, 2)[-1]
    a = model.attention
    attention = multi_head_attention(x, a.query.weight, a.key.weight, a.value.weight, a.output.weight, 2)
    injection = itrsa_injection(model, PUZZLE)
    drive = attention + injection
    if mlp_ratio:
        first, second = model.mlp[0], model.mlp[2]
        mlp = F.gelu(x @ first.weight.T + first.bias) @ second.weight.T + second.bias
        assert torch.allclose(jacobiscope.dynamics.drive_map(m, part="mlp")(x), mlp, atol=1e-12)
        drive = drive + mlp
    assert torch.allclose(jacobiscope.dynamics.drive_map(m)(x), drive, atol=1e-12)
    assert torch.allclose(jacobiscope.dynamics.drive_map(m, part="attention")(x), attention, atol=1e-12)
    assert torch.allclose(jacobiscope.dynamics.drive_map(m, part="injection")(x), injection, atol=1e-12)
    assert torch.allclose(jacobiscope.dynamics.without_norm(m)(x), x + 0.4 * drive, atol=1e-12)


def test_akorn_loop():
    torch.manual_seed(0)
    config = AKOrNConfig(hidden_size=8, num_heads=2, oscillator_dim=4, unit_embeddings=True)
    model = AKOrNForSudoku(config).eval().double()
    model.requires_grad_(False)
    m = model.loop_map(PUZZLE)
    x = m.trajectory(m.x0, 2)[-1]
    injection = model.embed.weight[PUZZLE] + model.unit_embed.weight[torch.tensor(
        [[i // 9, 9 + i % 9, 18 + 3 * (i // 27) + (i % 9) // 3] for i in range(81)])].sum(1)
    y = model.coupling(x) + injection
    assert torch.allclose(jacobiscope.dynamics.drive_map(m)(x), y, atol=1e-12)
    assert torch.allclose(jacobiscope.dynamics.drive_map(m, part="injection")(x), injection, atol=1e-12)
    # The oscillator update before the sphere projection, from gamma and omega by hand.
    omega = float(model.omega.norm())
    rotation = torch.stack([omega * x[..., 1::2], -omega * x[..., 0::2]], dim=-1).reshape(x.shape)
    xg, yg = x.reshape(2, 81, 2, 4), y.reshape(2, 81, 2, 4)
    tangent = (yg - (yg * xg).sum(-1, keepdim=True) * xg).reshape(x.shape)
    expected = x + float(model.gamma) * (rotation + tangent)
    bare = jacobiscope.dynamics.without_norm(m)
    assert torch.allclose(bare(x), expected, atol=1e-12)
    groups = expected.reshape(2, 81, 2, 4)
    assert torch.allclose(m(x), (groups / groups.norm(dim=-1, keepdim=True)).reshape(x.shape), atol=1e-12)


def test_attention_mode_of_gpt2():
    model = tiny_model("gpt2", dtype=torch.float64).requires_grad_(False)
    m = jacobiscope.looped_block(model, tiny_inputs("gpt2"), layer=1, mode="attention", eta=0.5)
    attn, ln = model.h[1].attn, model.h[1].ln_1
    x = m.x0
    Wq, Wk, Wv = attn.c_attn.weight.T.chunk(3, dim=0)  # Conv1D stores [in, out]
    bq, bk, bv = attn.c_attn.bias.chunk(3)
    attention = multi_head_attention(x, Wq, Wk, Wv, attn.c_proj.weight.T, 2, causal=True,
                                     biases=(bq, bk, bv, attn.c_proj.bias))
    assert torch.allclose(jacobiscope.dynamics.drive_map(m)(x), attention, atol=1e-12)
    assert torch.allclose(jacobiscope.dynamics.without_norm(m)(x), x + 0.5 * attention, atol=1e-12)
    assert torch.allclose(ln(jacobiscope.dynamics.without_norm(m)(x)), m(x), atol=1e-12)
    assert torch.count_nonzero(jacobiscope.dynamics.drive_map(m, part="injection")(x)) == 0


def test_submaps_use_the_maps_parameters_dtype_and_drive():
    m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, injection=True, seed=2)
    halved = m.with_params({"output.weight": 0.5 * m.params["output.weight"]})
    x = m.x0
    assert torch.allclose(jacobiscope.dynamics.drive_map(halved, part="attention")(x),
                          0.5 * jacobiscope.dynamics.drive_map(m, part="attention")(x), atol=1e-6)
    wide = jacobiscope.dynamics.drive_map(m.to(torch.float64))
    assert wide.dtype == torch.float64 and wide.trajectory(x, 1).dtype == torch.float64
    states = m.trajectory(x, 3)
    assert torch.allclose(jacobiscope.pseudo_energy(states, jacobiscope.dynamics.without_norm(m)),
                          jacobiscope.pseudo_energy(states, m))


def test_spectral_norm_of_the_drive_is_the_attention_jacobian_norm():
    m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, injection=True, seed=3, dtype=torch.float64)
    block = m.module.requires_grad_(False)
    dense = torch.autograd.functional.jacobian(block.attention, m.x0).reshape(24, 24)
    assert float(jacobiscope.spectral_norm(jacobiscope.dynamics.drive_map(m), m.x0).value) == pytest.approx(
        float(torch.linalg.matrix_norm(dense, 2)), rel=1e-9)


def test_bad_requests_name_the_fix():
    m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2)
    with pytest.raises(ArgumentError, match=r"parts \['attention', 'injection'\]"):
        jacobiscope.dynamics.drive_map(m, part="mlp")
    model = AKOrNForSudoku(AKOrNConfig(hidden_size=8, num_heads=2, oscillator_dim=4, oscillator_norm=True)).eval()
    with pytest.raises(ArgumentError, match="oscillator_norm"):
        jacobiscope.dynamics.drive_map(model.loop_map(PUZZLE), part="attention")
    block = jacobiscope.looped_block(tiny_model("gpt2"), tiny_inputs("gpt2"), layer=0)
    with pytest.raises(ArgumentError, match="block-mode"):
        jacobiscope.dynamics.without_norm(block)
