"""Prop. 5.1 bound: it bounds the dense ||J||_2, and each of its components is what a dense computation says."""
import pytest
import torch

import jacobiscope
from jacobiscope.errors import ArgumentError
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

from hf_models import tiny_inputs, tiny_model

PUZZLE = torch.zeros(1, 81, dtype=torch.long)
PUZZLE[0, [0, 10, 20, 40, 80]] = torch.tensor([1, 2, 3, 4, 5])


def dense_jacobian(function, x):
    """Independent reference: the dense autograd Jacobian, [D, D]."""
    return torch.autograd.functional.jacobian(function, x, vectorize=True).reshape(x.numel(), x.numel())


def dense_norm(function, x):
    return float(torch.linalg.matrix_norm(dense_jacobian(function, x), 2))


def random_gains(norm, seed):
    """Give a norm a non-trivial gain (fresh models have gamma = 1, which would hide a misread gain)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        norm.weight.copy_(torch.empty(norm.weight.shape).uniform_(-2.0, 2.0, generator=generator))


def itrsa_model(**overrides):
    torch.manual_seed(0)
    model = ItrSAForSudoku(ItrSAConfig(hidden_size=8, num_heads=2, initializer_range=0.3, eta=0.7, **overrides)).eval()
    random_gains(model.norm, 1)
    return model.double()


def states_of(m, generator_seed=0):
    """Trajectory states of the map and random states of two scales."""
    generator = torch.Generator().manual_seed(generator_seed)
    trajectory = m.trajectory(m.x0, 2)
    scales = (0.3, 4.0) if m.x0.numel() < 100 else (4.0,)  # the Sudoku loops (D = 648) cost more per state
    randoms = [scale * torch.randn(m.x0.shape, generator=generator, dtype=torch.float64) for scale in scales]
    return list(trajectory) + randoms


def maps():
    itrsa = itrsa_model().loop_map(PUZZLE)
    torch.manual_seed(0)
    akorn = AKOrNForSudoku(AKOrNConfig(hidden_size=8, num_heads=2, oscillator_dim=4)).eval().double().loop_map(PUZZLE)
    systems = [jacobiscope.systems.self_attention_map(tokens=5, dim=8, heads=2, eta=eta, injection=True,
                                                      weight_scale=scale, seed=seed, dtype=torch.float64)
               for eta, scale, seed in ((0.8, 1.5, 3), (3.0, 3.0, 4))]
    layernorm = jacobiscope.systems.self_attention_map(tokens=5, dim=8, heads=2, norm="layernorm", seed=5,
                                                       dtype=torch.float64)
    with torch.no_grad():
        systems[1].module.gain.uniform_(-1.5, 1.5, generator=torch.Generator().manual_seed(7))
    return {"itrsa": itrsa, "akorn": akorn, "systems": systems[0], "systems-gain": systems[1], "layernorm": layernorm}


MAPS = maps()


@pytest.mark.parametrize("name", sorted(MAPS))
def test_bound_holds_against_the_dense_norm_at_many_states(name):
    m = MAPS[name]
    for x in states_of(m):
        result = jacobiscope.dynamics.norm_bound(m, x)
        truth = dense_norm(m.step, x)
        assert float(result.measured) == pytest.approx(truth, rel=1e-8)
        assert float(result.bound) >= truth * (1 - 1e-10)
        assert float(result.ratio) == pytest.approx(float(result.bound) / truth, rel=1e-8)


def hf_attention_map(family, seed):
    model = tiny_model(family, dtype=torch.float64)
    m = jacobiscope.looped_block(model, tiny_inputs(family), layer=1, mode="attention", eta=0.7)
    random_gains(m.module.norm, seed)
    return m


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama", "gemma"])
def test_attention_mode_maps_of_hf_models(family):
    m = hf_attention_map(family, seed=3)
    weight = m.module.norm.weight.detach()
    gain = 1 + weight if family == "gemma" else weight  # Gemma's RMSNorm multiplies by (1 + weight)
    generator = torch.Generator().manual_seed(0)
    for x in [m.x0, m(m.x0), 2.0 * torch.randn(m.x0.shape, generator=generator, dtype=torch.float64)]:
        result = jacobiscope.dynamics.norm_bound(m, x)
        assert float(result.max_gamma) == pytest.approx(float(gain.abs().max()), rel=1e-12)
        assert result.norm_kind == ("layernorm" if family in ("gpt2", "bert") else "rmsnorm")
        truth = dense_norm(m.step, x)
        assert float(result.bound) >= truth * (1 - 1e-7)  # Llama-style norms compute in float32 inside


def test_components_against_dense_computations_itrsa():
    model = itrsa_model()
    m = model.loop_map(PUZZLE)
    x = m.trajectory(m.x0, 2)[-1]
    result = jacobiscope.dynamics.norm_bound(m, x)
    model.requires_grad_(False)
    injection = model.embed(PUZZLE) + model.position()
    z = x + model.config.eta * (model.attention(x) + injection)
    R = torch.sqrt(z.pow(2).mean(-1) + model.config.norm_eps).min()
    assert float(result.R) == pytest.approx(float(R), rel=1e-12)
    assert float(result.max_gamma) == pytest.approx(float(model.norm.weight.abs().max()), rel=1e-12)
    assert float(result.eta) == 0.7
    inner = dense_norm(lambda state: model.attention(state) + injection, x)
    assert float(result.inner_norm) == pytest.approx(inner, rel=1e-8)
    # The two factors of the bound, each against the dense Jacobian it bounds.
    assert dense_norm(model.norm, z) <= float(result.max_gamma / result.R) * (1 + 1e-10)
    residual = dense_jacobian(lambda state: state + 0.7 * (model.attention(state) + injection), x)
    assert float(torch.linalg.matrix_norm(residual, 2)) <= 1 + 0.7 * inner + 1e-10


def test_components_layernorm_and_oscillator_forms():
    m = MAPS["layernorm"]
    block = m.module.requires_grad_(False)
    z = m.x0 + block.eta * block.drive(m.x0)
    result = jacobiscope.dynamics.norm_bound(m, m.x0)
    assert float(result.R) == pytest.approx(float(torch.sqrt(z.var(-1, unbiased=False) + block.eps).min()), rel=1e-12)
    assert dense_norm(block.normalize, z) <= float(result.max_gamma / result.R) * (1 + 1e-10)

    akorn = MAPS["akorn"]
    model, x = akorn.module.model.requires_grad_(False), akorn.trajectory(akorn.x0, 2)[-1]
    result = jacobiscope.dynamics.norm_bound(akorn, x)
    y = model.drive(x, model.injection(PUZZLE))
    groups_x, groups_y = x.reshape(1, 81, -1, 4), y.reshape(1, 81, -1, 4)
    direction = model.rotation(x) + (groups_y - (groups_y * groups_x).sum(-1, keepdim=True) * groups_x).reshape(x.shape)
    z = x + model.gamma * direction
    assert float(result.R) == pytest.approx(float(z.reshape(1, 81, -1, 4).norm(dim=-1).min()), rel=1e-12)
    assert (result.form, result.norm_kind, float(result.max_gamma)) == ("oscillator", "sphere", 1.0)
    assert torch.allclose(model.normalize(z), akorn(x), atol=1e-14)  # the update read is the model's own


def test_batched_map_gives_one_bound_per_trajectory():
    m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, batch=3, seed=2, dtype=torch.float64)
    result = jacobiscope.dynamics.norm_bound(m, m.x0)
    assert result.bound.shape == result.R.shape == result.max_gamma.shape == (3,)
    for row in range(3):
        single = jacobiscope.dynamics.norm_bound(jacobiscope.as_looped_map(m, batch_dims=0), m.x0[row])
        assert float(result.bound[row]) == pytest.approx(float(single.bound), rel=1e-8)


@pytest.mark.parametrize("name", ["itrsa-sudoku", "akorn-sudoku"])
def test_trained_checkpoints(name):
    from jacobiscope.data import sudoku

    model = jacobiscope.load_pretrained(name).eval()
    puzzle = sudoku.to_tensor(["670000005003040082040005136000730090304206070001090600509008000000950208000127400"])
    m = model.loop_map(puzzle).to(torch.float64)
    states = m.trajectory(m.x0, 16)
    for t in (0, 15) if name == "itrsa-sudoku" else (15,):
        result = jacobiscope.dynamics.norm_bound(m, states[t], tol=1e-12)
        assert result.converged
        assert float(result.bound) >= float(result.measured)
        if name == "itrsa-sudoku":
            assert float(result.max_gamma) == pytest.approx(float(model.norm.weight.detach().abs().max()), rel=1e-6)


def test_maps_without_the_form_are_refused_with_the_fix():
    model = tiny_model("gpt2", dtype=torch.float64)
    block = jacobiscope.looped_block(model, tiny_inputs("gpt2"), layer=0)
    with pytest.raises(ArgumentError, match="mode='attention'"):
        jacobiscope.dynamics.norm_bound(block)
    with pytest.raises(ArgumentError, match="plain callable"):
        jacobiscope.dynamics.norm_bound(jacobiscope.LoopedMap(lambda x: x / x.norm()), torch.ones(3))
    with pytest.raises(ArgumentError, match="composed map"):
        jacobiscope.dynamics.norm_bound(MAPS["systems"].power(2))
    odd = hf_attention_map("gpt2", seed=1)
    odd.module.norm = torch.nn.Tanh()  # not a normalization at all
    with pytest.raises(ArgumentError, match="RMSNorm or a LayerNorm"):
        jacobiscope.dynamics.norm_bound(odd)


def test_with_params_overrides_reach_the_bound():
    m = MAPS["systems"]
    doubled = m.with_params({"gain": 2.0 * m.params["gain"]})
    assert float(jacobiscope.dynamics.norm_bound(doubled).max_gamma) == pytest.approx(
        2.0 * float(jacobiscope.dynamics.norm_bound(m).max_gamma), rel=1e-12)
