import pytest
import torch

import jacobiscope


def test_pseudo_energy_is_minus_trace_of_xt_y():
    X = torch.randn(5, 3, dtype=torch.float64)
    Y = torch.randn(5, 3, dtype=torch.float64)
    assert torch.allclose(jacobiscope.pseudo_energy(X, Y), -torch.trace(X.T @ Y))


def test_pseudo_energy_along_a_trajectory_uses_the_maps_drive(attention_map64):
    m = attention_map64
    states = m.trajectory(steps=4)
    energies = jacobiscope.pseudo_energy(states, m)
    assert energies.shape == (5,)
    block = m.module
    for t in range(5):
        drive = block.attention(states[t]) + block.injection  # Y_t = MSA(X_t) + C, computed independently
        assert torch.allclose(energies[t], -torch.trace(states[t].T @ drive))


def test_batched_trajectory_gives_time_by_batch_energies():
    m = jacobiscope.systems.self_attention_map(tokens=3, dim=4, heads=2, batch=2, injection=True, dtype=torch.float64)
    energies = jacobiscope.pseudo_energy(m.trajectory(steps=3), m)
    assert energies.shape == (4, 2)
    single = jacobiscope.pseudo_energy(m.x0[1], m.module.drive(m.x0[1]))
    assert torch.allclose(energies[0, 1], single)


def test_maps_without_a_drive_and_mismatched_shapes_are_refused():
    m = jacobiscope.LoopedMap(lambda x: x)
    with pytest.raises(AttributeError, match="exposes no drive"):
        jacobiscope.pseudo_energy(torch.ones(2), m)
    with pytest.raises(ValueError, match="shape of the states"):
        jacobiscope.pseudo_energy(torch.ones(2, 3), torch.ones(3, 2))
