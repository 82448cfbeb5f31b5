"""Eigenpairs of S = (J + J^T) / 2 against torch.linalg.eigh of the dense S; overlaps; the energy split."""
import math

import pytest
import torch

import jacobiscope
from jacobiscope.errors import ArgumentError
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku
from jacobiscope.dynamics._symmetric import _random_overlap

from hf_models import tiny_inputs, tiny_model

PUZZLE = torch.zeros(1, 81, dtype=torch.long)
PUZZLE[0, [0, 10, 20, 40]] = torch.tensor([1, 2, 3, 4])


def dense_symmetric_part(function, x):
    J = torch.autograd.functional.jacobian(function, x, vectorize=True).reshape(x.numel(), x.numel())
    return 0.5 * (J + J.T)


def reference_pairs(S, k, which):
    values, vectors = torch.linalg.eigh(S)
    order = {"largest": torch.argsort(values, descending=True), "smallest": torch.argsort(values),
             "magnitude": torch.argsort(values.abs(), descending=True)}[which][:k]
    return values[order], vectors[:, order].T


def attention_map():
    return jacobiscope.systems.self_attention_map(tokens=6, dim=8, heads=2, eta=0.8, injection=True,
                                                  weight_scale=2.0, seed=4, dtype=torch.float64)


@pytest.mark.parametrize("which", ["largest", "smallest", "magnitude"])
def test_eigenpairs_match_eigh_of_the_dense_symmetric_part(which):
    m = attention_map()
    x = m.trajectory(m.x0, 2)[-1]
    # krylov_dim 14 < D = 48 forces thick restarts
    pairs = jacobiscope.dynamics.symmetric_eigenpairs(m, x, k=3, which=which, krylov_dim=14, max_restarts=300)
    values, vectors = reference_pairs(dense_symmetric_part(m.step, x), 3, which)
    assert pairs.converged and pairs.restarts > 0
    assert torch.allclose(pairs.values, values, atol=1e-8, rtol=0)
    alignment = (pairs.vectors.reshape(3, -1) * vectors).sum(1).abs()  # eigenvectors are defined up to sign
    assert torch.allclose(alignment, torch.ones(3, dtype=torch.float64), atol=1e-8, rtol=0)
    assert float(pairs.residuals.max()) < 1e-9


def test_batched_maps_and_a_sudoku_loop():
    m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, batch=3, seed=5, dtype=torch.float64)
    pairs = jacobiscope.dynamics.symmetric_eigenpairs(m, m.x0, k=2)
    assert pairs.values.shape == (3, 2) and pairs.vectors.shape == (2, 3, 4, 6)
    single = jacobiscope.as_looped_map(m, batch_dims=0)
    for row in range(3):
        values, _ = reference_pairs(dense_symmetric_part(single.step, m.x0[row]), 2, "largest")
        assert torch.allclose(pairs.values[row], values, atol=1e-8, rtol=0)
    torch.manual_seed(0)
    model = ItrSAForSudoku(ItrSAConfig(hidden_size=8, num_heads=2, initializer_range=0.3)).eval().double()
    loop = model.loop_map(PUZZLE)
    pairs = jacobiscope.dynamics.symmetric_eigenpairs(loop, loop.x0, k=2)
    values, _ = reference_pairs(dense_symmetric_part(loop.step, loop.x0), 2, "largest")
    assert torch.allclose(pairs.values[0], values, atol=1e-8, rtol=0)


def test_overlaps_along_the_loop():
    m = attention_map()
    along = jacobiscope.dynamics.symmetric_overlap_along_loop(m, loops=3, k=2, reference=1)
    states = m.trajectory(m.x0, 3)
    _, reference_vectors = reference_pairs(dense_symmetric_part(m.step, states[1]), 2, "largest")
    for t in range(4):
        values, vectors = reference_pairs(dense_symmetric_part(m.step, states[t]), 2, "largest")
        unit = states[t].reshape(-1) / states[t].norm()
        assert torch.allclose(along.values[t], values, atol=1e-8, rtol=0)
        assert torch.allclose(along.own[t], (vectors @ unit).abs(), atol=1e-8, rtol=0)
        assert torch.allclose(along.fixed[t], (reference_vectors @ unit).abs(), atol=1e-8, rtol=0)
    assert along.reference == 1 and along.converged
    assert along.chance == pytest.approx(_random_overlap(48))


def test_chance_overlap_is_the_mean_absolute_coordinate_of_a_random_unit_vector():
    assert _random_overlap(2) == pytest.approx(2 / math.pi)  # E|cos theta| on the circle
    assert _random_overlap(3) == pytest.approx(0.5)  # Archimedes: u_1 is uniform on [-1, 1]
    assert _random_overlap(10_000) == pytest.approx(math.sqrt(2 / (math.pi * 10_000)), rel=1e-3)


def test_energy_split_sums_to_the_pseudo_energy():
    m = attention_map()
    states = m.trajectory(m.x0, 4)
    split = jacobiscope.dynamics.energy_split(states, m)
    block = m.module
    attention = torch.stack([-(s * block.attention(s)).sum() for s in states])
    injection = torch.stack([-(s * block.injection).sum() for s in states])
    assert torch.allclose(split.parts["attention"], attention, atol=1e-12)
    assert torch.allclose(split.parts["injection"], injection, atol=1e-12)
    assert torch.allclose(split.parts["attention"] + split.parts["injection"], split.total, atol=1e-12)


@pytest.mark.parametrize("kind", ["itrsa-mlp", "akorn", "gpt2"])
def test_energy_split_of_models(kind):
    torch.manual_seed(0)
    if kind == "itrsa-mlp":
        model = ItrSAForSudoku(ItrSAConfig(hidden_size=8, num_heads=2, mlp_ratio=2)).eval().double()
        m = model.loop_map(PUZZLE.repeat(2, 1))
        names = ["attention", "mlp", "injection"]
    elif kind == "akorn":
        model = AKOrNForSudoku(AKOrNConfig(hidden_size=8, num_heads=2, oscillator_dim=4)).eval().double()
        m = model.loop_map(PUZZLE.repeat(2, 1))
        names = ["attention", "injection"]
    else:
        m = jacobiscope.looped_block(tiny_model("gpt2", dtype=torch.float64), tiny_inputs("gpt2"), 1, mode="attention")
        names = ["attention", "injection"]
    states = m.trajectory(m.x0, 3)
    split = jacobiscope.dynamics.energy_split(states, m)
    assert list(split.parts) == names and split.total.shape == states.shape[:2]
    assert torch.allclose(sum(split.parts.values()), split.total, atol=1e-10)
    if kind == "gpt2":
        assert torch.count_nonzero(split.parts["injection"]) == 0 and "no injection" in split.injection


def test_bad_arguments():
    m = attention_map()
    with pytest.raises(ArgumentError, match="which must be one of"):
        jacobiscope.dynamics.symmetric_eigenpairs(m, k=2, which="top")
    with pytest.raises(ArgumentError, match="larger than the state size"):
        jacobiscope.dynamics.symmetric_eigenpairs(m, k=49)
    with pytest.raises(ArgumentError, match="reference must be a loop index"):
        jacobiscope.dynamics.symmetric_overlap_along_loop(m, loops=2, reference=5)
    model = AKOrNForSudoku(AKOrNConfig(hidden_size=8, num_heads=2, oscillator_dim=4, oscillator_norm=True)).eval()
    loop = model.loop_map(PUZZLE)
    with pytest.raises(ArgumentError, match="does not split"):
        jacobiscope.dynamics.energy_split(loop.trajectory(loop.x0, 1), loop)
