"""jacobiscope/dynamics/_dense_tangent.py: the QR loop of tiny states on batched dense Jacobians.

References: a NumPy Benettin loop with the Hénon map's analytic Jacobian (what a small peer library does), exact
exponents of a linear map, and the jvp loop (``compile=False``) on the same orbit and frame.
"""
import math

import numpy as np
import pytest
import torch

import jacobiscope
from jacobiscope.dynamics import _dense_tangent


def lorenz96(n=12):
    return jacobiscope.systems.lorenz96_map(n)


def test_lorenz96_map_is_one_rk4_step_of_its_field():
    """The system's own reference: an RK4 step written out from the field, and the Jacobian by dense autograd."""
    m, forcing, dt = jacobiscope.systems.lorenz96_map(6, forcing=5.0, dt=0.02), 5.0, 0.02
    x = m.x0 + torch.linspace(-1, 1, 6, dtype=torch.float64)

    def field(z):
        return np.array([(z[(i + 1) % 6] - z[(i - 2) % 6]) * z[(i - 1) % 6] - z[i] + forcing for i in range(6)])

    z = x.numpy()
    k1 = field(z)
    k2 = field(z + dt / 2 * k1)
    k3 = field(z + dt / 2 * k2)
    k4 = field(z + dt * k3)
    assert m(x).numpy() == pytest.approx(z + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), abs=1e-13)
    with pytest.raises(jacobiscope.errors.ArgumentError, match="n must be at least 4"):
        jacobiscope.systems.lorenz96_map(3)


def test_henon_exponents_equal_a_numpy_benettin_loop_with_the_analytic_jacobian():
    a, b = 1.4, 0.3
    m = jacobiscope.systems.henon_map(a, b)
    x = m.x0
    with torch.no_grad():
        for _ in range(100):
            x = m(x)
    frame = torch.eye(2, dtype=torch.float64)
    result = jacobiscope.lyapunov_spectrum(m, x, steps=3000, k=2, tangents=frame)
    assert result.meta["tangent_path"] == "dense"
    # The orbit from the map itself (a chaotic orbit recomputed in NumPy parts from it at rounding within ~80 loops);
    # the Jacobians from the formula, the QR recursion by hand.
    with torch.no_grad():
        orbit = [x]
        for _ in range(2999):
            orbit.append(m(orbit[-1]))
    W, total = np.eye(2), np.zeros(2)
    for state in orbit:
        J = np.array([[-2 * a * float(state[0]), 1.0], [b, 0.0]])
        W, R = np.linalg.qr(J @ W)
        total += np.log(np.abs(np.diag(R)))
    assert result.exponents.tolist() == pytest.approx(sorted(total / 3000, reverse=True), abs=1e-10)
    assert float(result.exponents.sum()) == pytest.approx(math.log(b), abs=1e-10)   # |det J| = b everywhere


@pytest.mark.parametrize("case", ["henon-batch", "lorenz96", "logistic", "reorth-3"])
def test_the_dense_loop_gives_the_jvp_loops_numbers(case):
    if case == "henon-batch":
        m, options = jacobiscope.systems.henon_map(batch=3), dict(steps=300, k=2, transient=20)
    elif case == "lorenz96":
        m, options = lorenz96(), dict(steps=200, k=5, transient=10)
    elif case == "logistic":
        m, options = jacobiscope.systems.logistic_map(3.9, batch=4), dict(steps=300, k=1)
    else:
        m, options = lorenz96(8), dict(steps=200, k=8, reorth_every=3)
    dense = jacobiscope.lyapunov_spectrum(m, **options)
    reference = jacobiscope.lyapunov_spectrum(m, **options, compile=False)
    assert dense.meta["tangent_path"] == "dense" and reference.meta["tangent_path"] == "eager"
    assert torch.allclose(dense.exponents, reference.exponents, atol=1e-10, rtol=0)
    assert torch.allclose(dense.history, reference.history, atol=1e-10, rtol=0)
    assert torch.allclose(dense.final_state, reference.final_state, atol=1e-12, rtol=0)


def test_a_linear_map_over_several_chunks_gives_its_exact_exponents(monkeypatch):
    monkeypatch.setattr(_dense_tangent, "CHUNK", 7)   # the chunk seams: loops 7, 14, ... carry the frame across
    A = torch.tensor([[0.9, 0.5, 0.0], [0.0, -1.2, 0.3], [0.0, 0.0, 0.4]], dtype=torch.float64)
    m = jacobiscope.systems.linear_map(A)
    result = jacobiscope.lyapunov_spectrum(m, steps=60, k=3)
    assert result.meta["tangent_path"] == "dense"
    expected = sorted(math.log(abs(v)) for v in (0.9, -1.2, 0.4))[::-1]
    assert result.exponents.tolist() == pytest.approx(expected, abs=0.03)
    assert float(result.exponents.sum()) == pytest.approx(sum(expected), abs=1e-10)   # log |det A| per loop, exactly


def test_a_step_vmap_cannot_batch_stays_on_the_jvp_loop():
    def step(x):   # Python control flow on the state's values: vmap refuses it
        return torch.tanh(2 * x) if float(x.detach().sum()) > -100 else x

    m = jacobiscope.LoopedMap(step, x0=torch.tensor([0.3, -0.2], dtype=torch.float64))
    result = jacobiscope.lyapunov_spectrum(m, steps=30, k=2)
    assert result.meta["tangent_path"] != "dense"
    assert torch.isfinite(result.exponents).all()


def test_an_orbit_that_overflows_is_flagged_as_on_the_jvp_loop():
    m = jacobiscope.LoopedMap(lambda x: 3.0 * x * x + 1.0, x0=torch.tensor([2.0, 1.0], dtype=torch.float64))
    with pytest.warns(jacobiscope.NonFiniteWarning, match="became NaN/Inf"):
        dense = jacobiscope.lyapunov_spectrum(m, steps=40, k=2)
    with pytest.warns(jacobiscope.NonFiniteWarning):
        reference = jacobiscope.lyapunov_spectrum(m, steps=40, k=2, compile=False)
    assert dense.meta["tangent_path"] == "dense"
    assert int(dense.nonfinite_step) == int(reference.nonfinite_step) > 0
    assert torch.isnan(dense.exponents).all()
