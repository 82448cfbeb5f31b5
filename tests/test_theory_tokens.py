"""Theory spec Part A targets: regime table, OA vs splay particles, conserved quantity, RK4 order, order parameters."""
import math

import pytest
import torch

from jacobiscope.dynamics.clusters import token_order_parameters
from jacobiscope.errors import ArgumentError, StateError
from jacobiscope.theory import tokens as T

D = torch.float64
I2 = torch.eye(2, dtype=D)
J = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=D)


def m(rows):
    return torch.tensor(rows, dtype=D)


# (A, V, expected regime, expected fixed point or period) — spec A.4 "verified examples", beta = 1.
TABLE = [
    (m([[1, 0], [0, 0.5]]), I2, "clustering", None),
    (m([[1, 0], [0, -2]]), I2, "clustering", None),
    (m([[1, -2], [2, -1]]), I2, "clustering", None),
    (m([[-1, 0], [0, -2]]), I2, "interior_fixed_point", 1 / 3),
    (-I2 + 0.5 * J, I2, "interior_fixed_point", 0j),
    (m([[0.5, -2], [2, -1]]), I2, "interior_fixed_point", 0.0462 - 0.3692j),
    (I2, m([[1, 0], [0, -2]]), "clustering", None),
    (I2, m([[-0.5, 0], [0, -1]]), "interior_fixed_point", 1 / 3),
    (I2, -I2, "interior_fixed_point", 0j),
    (I2, m([[0, 0], [0, -1]]), "clustering", None),  # slow algebraic approach, |Z| ~ 0.995 at t = 400
    (I2, m([[1.1, -0.5], [0.5, 0.9]]), "rotating_clusters", 6.41275),
    (I2, m([[1.5, -0.3], [0.3, 0.5]]), "clustering", None),
    (m([[2, 0], [0, 1]]), 0.5 * I2 + J, "rotating_clusters", math.pi / math.sqrt(2)),
    (I2, m([[0.5, 1], [-1, -0.5]]), "oscillation", None),
    (I2, m([[1, 0.5], [-0.5, -1]]), "clustering", None),
]


@pytest.mark.slow  # suite time: a longer end-to-end run (pytest -m slow)
def test_regime_table_oa():
    A = torch.stack([a for a, _, _, _ in TABLE])
    V = torch.stack([v for _, v, _, _ in TABLE])
    # One batched OA integration for the whole table (and the spec's initial condition Z0 = 0.3 + 0.1i).
    r = T.classify_regime(A, V, z0=0.3 + 0.1j, horizon=400.0, dt=0.05)
    for i, (_, _, expected, target) in enumerate(TABLE):
        assert r.regime[i] == expected, (i, r.regime[i], {k: v[i] for k, v in r.evidence.items()
                                                           if isinstance(v, list)})
        if expected == "interior_fixed_point":
            z = complex(*r.evidence["fixed_point"][i])
            assert abs(z - target) < 1e-3, (i, z)
        if expected == "rotating_clusters":
            assert abs(r.evidence["period"][i] - target) < 1e-3, (i, r.evidence["period"][i])
        if expected == "oscillation":
            assert 3.0 < r.evidence["period"][i] < 6.0
            assert r.evidence["order_std"][i] > 0.01 and r.evidence["order_min"][i] < 0.9


def test_particle_classifier_high_d():
    d = 4
    K = torch.zeros(d, d, dtype=D)
    K[0, 1], K[1, 0], K[2, 3], K[3, 2] = -1.0, 1.0, -1.0, 1.0
    A = torch.eye(d, dtype=D).expand(3, d, d)
    V = torch.stack([torch.eye(d, dtype=D), -torch.eye(d, dtype=D), torch.eye(d, dtype=D) + 0.5 * K])
    r = T.classify_regime(A, V, horizon=60.0, dt=0.1, n=12)
    assert r.evidence["method"] == "particles"
    assert r.regime == ["clustering", "interior_fixed_point", "rotating_clusters"], r.evidence
    # V = I + s K: the axis turns at exactly beta s (spec A.5), an axis period pi / s
    assert abs(r.evidence["arg_drift"][2] - 0.5) < 1e-3
    assert abs(r.evidence["period"][2] - 2 * math.pi) < 1e-2


def test_phase_form_matches_direct_field():
    g = torch.Generator().manual_seed(3)
    A, V = torch.randn(5, 2, 2, generator=g, dtype=D), torch.randn(5, 2, 2, generator=g, dtype=D)
    theta = 2 * math.pi * torch.rand(5, 37, generator=g, dtype=D)
    X = torch.stack([theta.cos(), theta.sin()], -1)
    direct = (T.tangent_field(X, A, V, beta=0.7) * torch.stack([-theta.sin(), theta.cos()], -1)).sum(-1)
    assert float((T.phase_velocity(theta, A, V, beta=0.7) - direct).abs().max()) < 1e-12


def test_oa_closed_form_A_identity():
    V = m([[0.3, -1.2], [0.4, -0.7]])
    nu, nup = T.complex_coefficients(V)
    Z = torch.tensor([0.1 + 0.2j, -0.5 + 0.3j], dtype=torch.complex128)
    closed = 0.5 * (nup * (1 + Z.abs() ** 2) + (2 * nu - nu.conj()) * Z - 2 * nup.conj() * Z ** 2
                    - nu.conj() * Z.abs() ** 2 * Z)
    assert float((T.oa_rhs(Z, I2, V) - closed).abs().max()) < 1e-14


@pytest.mark.parametrize("A,V", [(m([[-1, 0], [0, -2]]), I2), (I2, m([[0.5, 1], [-1, -0.5]]))])
def test_oa_matches_splay_particles(A, V):
    zeta = 0.4 * complex(math.cos(0.7), math.sin(0.7))
    theta = T.wrapped_cauchy_phases(zeta, 256, splay=True)
    X0 = torch.stack([theta.cos(), theta.sin()], -1)
    steps, dt = 1000, 0.01  # t in [0, 10]
    R2 = T.kuramoto_order(T.integrate_tokens(X0, A, V, steps, dt))
    Z = T.integrate_oa(T.kuramoto_order(X0), A, V, steps, dt)
    assert float((R2 - Z).abs().max()) < 1e-8


def test_hamiltonian_conserved():
    a, b = 0.5, 1.0
    V = m([[a, b], [-b, -a]])
    Z = T.integrate_oa(torch.tensor([0.3 + 0.1j, -0.2j, 0.1 + 0.4j], dtype=torch.complex128), I2, V,
                       steps=1000, dt=0.01)
    E = T.hamiltonian_energy(Z, a, b)
    assert float((E - E[0]).abs().max()) < 1e-8
    # the centre Z* = i y*, y* = (k-1)/(k+1), k = ((b-a)/(b+a))^(1/3), is a fixed point
    k = ((b - a) / (b + a)) ** (1 / 3)
    zstar = torch.tensor(1j * (k - 1) / (k + 1), dtype=torch.complex128)
    assert abs((k - 1) / (k + 1) + 0.18108) < 1e-5
    assert float(T.oa_rhs(zstar, I2, V).abs()) < 1e-12


def test_rk4_fourth_order_and_euler_first_order():
    d, n = 5, 8
    g = torch.Generator().manual_seed(1)
    K = torch.randn(d, d, generator=g, dtype=D)
    A, V = torch.eye(d, dtype=D), torch.eye(d, dtype=D) + (K - K.T) / 2
    X0 = torch.randn(n, d, generator=g, dtype=D)
    t = 4.0

    def end(dt, method, attention="linear"):
        return T.integrate_tokens(X0, A, V, int(round(t / dt)), dt, method=method, attention=attention)[-1]

    ref = end(0.0125, "rk4")
    e1, e2 = (end(0.2, "rk4") - ref).norm(), (end(0.1, "rk4") - ref).norm()
    ratio = float(e1 / e2)
    assert 12 < ratio < 20, ratio
    ref_u = end(0.0125, "rk4", "softmax")
    ratio_u = float((end(0.1, "rk4", "softmax") - ref_u).norm() / (end(0.05, "rk4", "softmax") - ref_u).norm())
    assert 12 < ratio_u < 22, ratio_u
    ratio_e = float((end(0.1, "euler") - ref).norm() / (end(0.05, "euler") - ref).norm())
    assert 1.7 < ratio_e < 2.3, ratio_e


def test_order_parameters_consistent_and_batched():
    A = torch.stack([I2, m([[2, 0], [0, 1]])])
    V = torch.stack([m([[1, 0], [0, -2]]), 0.5 * I2 + J])
    sim = T.simulate(A, V, n=10, d=2, steps=50, dt=0.1, seed=2)
    assert sim.states.shape == (51, 2, 10, 2) and sim.R2.shape == (51, 2)
    assert float((2 * sim.order.top_eigenvalue - 1 - sim.R2.abs()).abs().max()) < 1e-12
    assert float((sim.order.nematic_order - sim.R2.abs()).abs().max()) < 1e-12
    direct = token_order_parameters(sim.states[-1, 1])
    assert float(direct.top_eigenvalue - sim.order.top_eigenvalue[-1, 1]) == 0.0
    # batch elements are independent: the same system alone gives the same trajectory
    alone = T.simulate(A[1], V[1], n=10, d=2, steps=50, dt=0.1, x0=sim.states[0, 1])
    assert float((alone.states - sim.states[:, 1]).abs().max()) < 1e-13
    # LSA freezes token signs: flipping one token flips it along the whole trajectory
    x0 = sim.states[0, 0].clone(); x0[3] = -x0[3]
    flipped = T.simulate(A[0], V[0], n=10, d=2, steps=50, dt=0.1, x0=x0)
    assert float((flipped.states[:, 3] + sim.states[:, 0, 3]).abs().max()) < 1e-12


def test_softmax_rotating_cluster_speed():
    # USA, A = I, V = I + K in d = 4: rotating signed cluster at speed ~ e^beta * s (spec A.5), s = 0.5
    d = 4
    K = torch.zeros(d, d, dtype=D)
    K[0, 1], K[1, 0], K[2, 3], K[3, 2] = -0.5, 0.5, -0.5, 0.5
    sim = T.simulate(torch.eye(d, dtype=D), torch.eye(d, dtype=D) + K, n=8, d=d, steps=300, dt=0.05,
                     attention="softmax", seed=0)
    assert int(sim.order.signed_cluster_count[-1]) == 1
    assert abs(float(sim.axis_speed[-20:].mean()) - math.e * 0.5) < 1e-2


def test_errors():
    with pytest.raises(ArgumentError, match="shape"):
        T.simulate(torch.eye(3), torch.eye(2), n=4, d=3, steps=2, dt=0.1)
    with pytest.raises(ArgumentError, match="attention"):
        T.simulate(torch.eye(2), torch.eye(2), n=4, d=2, steps=2, dt=0.1, attention="relu")
    with pytest.raises(ArgumentError, match="particles"):
        T.classify_regime(torch.eye(2), torch.eye(2), attention="softmax", method="oa")


# ---------------------------------------------------------------------------------------------------- predictions
def test_predict_regime_reproduces_the_spec_table():
    for i, (A, V, expected, target) in enumerate(TABLE):
        p = T.predict_regime(A, V)
        assert p.regime == expected, (i, p.regime, p.evidence["rule"])
        if expected == "interior_fixed_point":
            assert abs(complex(*p.evidence["fixed_point"]) - target) < 1e-4, (i, p.evidence)
        if expected == "rotating_clusters":
            assert abs(p.evidence["period"] - target) < 1e-5, (i, p.evidence)
            assert p.evidence["mean_transverse_exponent"] < 0


def test_predicted_periods_follow_closed_forms():
    # SNIC family A = I, V = [[1 + delta, -s], [s, 1 - delta]]: T = pi / (beta sqrt(s^2 - delta^2)) (spec A.4 item 3)
    for s, beta in ((0.11, 1.0), (0.5, 2.0)):
        p = T.predict_regime(I2, m([[1.1, -s], [s, 0.9]]), beta=beta)
        assert p.regime == "rotating_clusters"
        assert abs(p.evidence["period"] / (math.pi / (beta * math.sqrt(s * s - 0.01))) - 1) < 1e-9
    # V = I, tr A = 0 < det A: circles about Z* = -0.5i; r = 0.2 gives T = 9.2232 (spec A.4 item 1)
    p = T.predict_regime(m([[1, -2], [2, -1]]), I2, z0=0.2 - 0.5j)
    assert p.regime == "oscillation" and abs(p.evidence["period"] - 9.2232) < 5e-4
    Z = T.integrate_oa(0.2 - 0.5j, m([[1, -2], [2, -1]]), I2, steps=3000, dt=0.01)
    assert float((Z + 0.5j).abs().sub(0.2).abs().max()) < 1e-8  # the orbit is that circle
    measured = T._crossing_period(Z.real - 0.0, None, 0.01, fallback=0.0)  # Re Z crosses Re Z* = 0 once a period
    assert abs(measured - p.evidence["period"]) < 1e-4, (measured, p.evidence["period"])
    # the centre family's boundary |a| = b of V = [[a, b], [-b, -a]], and the Type-2 side of the degenerate Hopf
    assert T.predict_regime(I2, m([[0.99, 1], [-1, -0.99]])).regime == "oscillation"
    assert T.predict_regime(I2, m([[1.01, 1], [-1, -1.01]])).regime == "clustering"
    assert T.predict_regime(I2, m([[0.55, 1], [-1, -0.45]])).regime == "rotating_clusters"


def test_circle_velocity_and_transverse_exponent_match_oa():
    # On the invariant circle Z = e^{i psi} the OA field is tangent, Z' = i psi' Z, and the transverse exponent is
    # -2 beta Re(kappa(Z) conj(Z)) (spec A.3): two independent routes to the same numbers.
    g = torch.Generator().manual_seed(4)
    A, V = torch.randn(2, 2, generator=g, dtype=D), torch.randn(2, 2, generator=g, dtype=D)
    psi = 2 * math.pi * torch.rand(16, generator=g, dtype=D)
    Z = torch.exp(1j * psi)
    beta = 0.7
    rhs = T.oa_rhs(Z, A, V, beta)
    assert float((rhs - 1j * T.circle_velocity(psi, A, V, beta) * Z).abs().max()) < 1e-13
    _, kappa = T._omega_kappa(Z, A, V)
    assert float((T.transverse_exponent(psi, A, V, beta) + 2 * beta * (kappa * Z.conj()).real).abs().max()) < 1e-13


def test_regime_table_rows():
    rows = T.regime_table([T.REGIME_TABLE[i] for i in (3, 10, 13)], horizon=100.0)
    assert [r["found"] for r in rows] == ["interior_fixed_point", "rotating_clusters", "oscillation"]
    assert all(r["agree"] for r in rows)
    assert abs(rows[0]["found_fixed_point"] - rows[0]["predicted_fixed_point"]) < 1e-6
    assert abs(rows[1]["found_period"] - rows[1]["predicted_period"]) < 1e-3
    for label, A, V, reported in T.REGIME_TABLE:  # the shipped table is the spec's, as this file's TABLE
        assert T.predict_regime(A, V).regime == reported, label
    assert set(T.REGIME_EXAMPLES) == set(T.TOKEN_REGIMES)
    for regime, (A, V) in T.REGIME_EXAMPLES.items():
        assert T.predict_regime(A, V).regime == regime


def test_prediction_errors():
    with pytest.raises(ArgumentError, match="one system"):
        T.predict_regime(torch.eye(2).expand(3, 2, 2), torch.eye(2))
    with pytest.raises(ArgumentError, match="shape"):
        T.predict_regime(torch.eye(3), torch.eye(3))
    with pytest.raises(ArgumentError, match="at least one"):
        T.regime_table([])


@pytest.mark.parametrize("call, problem", [
    pytest.param(lambda: T.simulate(torch.full((2, 2), math.nan), torch.eye(2), n=4, d=2, steps=2, dt=0.1),
                 "A holds 4 NaN/Inf entries", id="simulate-nan-matrix"),
    pytest.param(lambda: T.simulate(torch.eye(2), torch.eye(2), n=4, d=2, steps=2, dt=0.1, beta=math.inf),
                 "beta must be a finite number, got inf", id="simulate-beta-inf"),
    pytest.param(lambda: T.simulate(torch.eye(2), torch.eye(2), n=2, d=2, steps=2, dt=0.1,
                                    x0=torch.zeros(2, 2, dtype=torch.float64)),
                 "a zero token — tokens live on the sphere", id="simulate-zero-token"),
    pytest.param(lambda: T.predict_regime(torch.eye(2), torch.eye(2), z0=2.0), r"z0 must be a complex number in the "
                 r"unit disc \|z\| <= 1", id="predict-z0-outside"),
    pytest.param(lambda: T.predict_regime(torch.eye(2), torch.eye(2), z0="x"), "z0 must be a complex number",
                 id="predict-z0-str"),
    pytest.param(lambda: T.predict_regime(torch.eye(2), torch.eye(2), grid=3), "grid must be an int >= 16",
                 id="predict-grid"),
    pytest.param(lambda: T.predict_regime(torch.eye(2), torch.eye(2), beta=math.nan), "beta must be a finite number",
                 id="predict-beta-nan"),
    pytest.param(lambda: T.classify_regime(torch.eye(2), torch.eye(2), horizon=0.5), r"horizon=0.5 at dt=0.02 is 25 "
                 r"steps, and the verdict reads the last 25% of them \(6\): too few .* pass horizon >= 1.6",
                 id="classify-short-horizon"),
    pytest.param(lambda: T.classify_regime(torch.eye(2), torch.eye(2), horizon=math.nan), r"horizon must be a finite "
                 r"number in \(0, inf\)", id="classify-horizon-nan"),
    pytest.param(lambda: T.classify_regime(torch.eye(2), torch.eye(2), window=1.5), r"window is the late fraction "
                 r"of the run the verdict reads, in \(0, 1\]", id="classify-window"),
    pytest.param(lambda: T.classify_regime(torch.eye(2), torch.eye(2), z0=1.5j), "unit disc", id="classify-z0"),
])
def test_hostile_values_are_refused_before_any_integration(call, problem):
    # each of these used to integrate: a NaN matrix or a zero token gave a NaN flow, an R_2 outside the unit disc
    # an impossible start, a 0.5-unit horizon a regime named from 6 steps
    with pytest.raises((ArgumentError, StateError), match=problem):
        call()
