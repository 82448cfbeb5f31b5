"""Theory spec Part B targets: population losses vs Monte Carlo, gradients, SGD vs gradient flow, truncation, escape."""
import math

import pytest
import torch

from jacobiscope.errors import ArgumentError
from jacobiscope.theory import aim

D = torch.float64


def _pair(d, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(d, d, generator=g, dtype=D) / math.sqrt(d),
            torch.randn(d, d, generator=g, dtype=D) / math.sqrt(d) + 0.3 * torch.eye(d, dtype=D))


@pytest.mark.parametrize("link", ["he1", "he2"])
def test_exact_population_loss_matches_monte_carlo(link):
    d, samples = 6, 400_000
    S, T = _pair(d, 0)
    g = torch.Generator().manual_seed(1)
    x1, x2 = torch.randn(samples, d, generator=g, dtype=D), torch.randn(samples, d, generator=g, dtype=D)
    f, _ = aim.link_function(link)
    h = (x1 * (x2 @ S.T)).sum(-1) / math.sqrt(d)
    hs = (x1 * (x2 @ T.T)).sum(-1) / math.sqrt(d)
    err = (f(h) - f(hs)) ** 2
    mc, se = float(err.mean()), float(err.std() / math.sqrt(samples))
    exact = float(aim.population_loss(S, T, link))
    assert abs(mc - exact) < 4 * se, (mc, exact, se)
    if link == "he2":  # the finite-d correction is resolved: the Gaussian limit alone is many SE away
        gaussian = float(aim.population_loss(S, T, link, exact=False))
        assert abs(mc - gaussian) > 10 * se


@pytest.mark.parametrize("link", ["he2", "he3"])
def test_gaussian_limit_matches_gaussian_pairs(link):
    # The Gaussian-limit formulas are exact for jointly Gaussian (h, h*) with covariance [[Q, m], [m, rho]].
    Q, m, rho, samples = 0.8, 0.5, 1.1, 1_000_000
    L = torch.linalg.cholesky(torch.tensor([[Q, m], [m, rho]], dtype=D))
    z = torch.randn(samples, 2, generator=torch.Generator().manual_seed(2), dtype=D) @ L.T
    f, _ = aim.link_function(link)
    err = (f(z[:, 0]) - f(z[:, 1])) ** 2
    mc, se = float(err.mean()), float(err.std() / math.sqrt(samples))
    assert abs(mc - aim.population_loss_from(link, Q, m, rho)) < 4 * se


def test_softmax_loss_monte_carlo():
    S, T = _pair(5, 3)
    assert float(aim.population_loss(T, T, "softmax", samples=1000)) == 0.0
    a = aim.population_loss(torch.stack([S, T]), T, "softmax", samples=20_000, seed=0)
    b = aim.population_loss(S, T, "softmax", samples=20_000, seed=7)
    assert a.shape == (2,) and float(a[1]) == 0.0 and abs(float(a[0]) - float(b)) < 0.05 * float(b)


@pytest.mark.parametrize("link", ["he1", "he2", "he3"])
def test_population_gradient_is_gradient_of_loss(link):
    d = 5
    S, T = _pair(d, 4)
    S = S.requires_grad_(True)
    auto = torch.autograd.grad(aim.population_loss(S, T, link), S)[0] * d
    assert float((aim.population_gradient(S.detach(), T, link) - auto).abs().max()) < 1e-12


def test_one_sample_gradients_match_autograd():
    # The O(d r) updates of online_sgd are the exact gradients of (f(h) - y)^2 (checked through one SGD step).
    d = 4
    S_star, _ = _pair(d, 5)
    for param in ("direct", "tied", "untied"):
        run = aim.online_sgd(S_star, link="he3", parameterization=param, steps=1, lr=1e-3, seed=3, record_every=1)
        g = torch.Generator().manual_seed(3)
        draws = [torch.randn(d, d, generator=g, dtype=D)]
        if param != "direct":
            draws = [0.5 * draws[0]] + ([0.5 * torch.randn(d, d, generator=g, dtype=D)] if param == "untied" else [])
        x1, x2 = torch.randn(d, generator=g, dtype=D), torch.randn(d, generator=g, dtype=D)
        f, _ = aim.link_function("he3")
        kappa = 1 / d
        if param == "direct":
            P0 = [0.5 * (draws[0] + draws[0].T) / math.sqrt(2 * d)]
        else:
            P0 = draws
        P = [p.clone().requires_grad_(True) for p in P0]
        S = P[0] if param == "direct" else (kappa * P[0] @ P[0].T if param == "tied" else kappa * P[0] @ P[1].T)
        loss = (f(x1 @ S @ x2 / math.sqrt(d)) - f(x1 @ S_star @ x2 / math.sqrt(d))) ** 2
        grads = torch.autograd.grad(loss, P)
        expected = [p - 1e-3 * gr for p, gr in zip(P0, grads)]
        got = run.params if isinstance(run.params, tuple) else (run.params,)
        for e, o in zip(expected, got):
            assert float((e - o).abs().max()) < 1e-13, param


def test_tied_sgd_tracks_gradient_flow():
    d, eta, runs = 20, 0.02, 8
    g = torch.Generator().manual_seed(5)
    W = torch.randn(d, d, generator=g, dtype=D)
    T = W @ W.T / d
    steps = int(0.5 * d * d / eta)  # t = 0.5
    run = aim.online_sgd(T, link="he1", parameterization="tied", steps=steps, eta=eta, runs=runs,
                         record_every=steps, seed=2, init_scale=0.5)
    assert abs(float(run.times[-1]) - 0.5) < 1e-12
    W0 = 0.5 * torch.randn(runs, d, d, generator=torch.Generator().manual_seed(2), dtype=D)
    _, S = aim.gradient_flow(T, W0 @ W0.mT / d, link="he1", parameterization="tied", t=0.5, dt=0.01)
    flow = aim.order_parameters(S[-1], T)
    for key in ("Q", "m"):
        rel = (run.order[key][-1] - flow[key]).abs() / flow[key].abs()
        assert float(rel.max()) < 0.03, (key, rel)


def test_untied_and_direct_flows_consistent():
    # The untied flow closed in (S, A, B) agrees with integrating U, V directly (for a short time, by Euler-free
    # comparison: both with RK4 at the same dt).
    d = 6
    g = torch.Generator().manual_seed(8)
    T, _ = _pair(d, 9)
    U0, V0 = 0.5 * torch.randn(d, d, generator=g, dtype=D), 0.5 * torch.randn(d, d, generator=g, dtype=D)
    kappa = 1 / d
    _, S = aim.gradient_flow(T, kappa * U0 @ V0.T, link="he2", parameterization="untied", t=0.2, dt=0.01,
                             A0=kappa * U0 @ U0.T, B0=kappa * V0 @ V0.T)

    def rhs(U, V):  # dU/dt = -(kappa d) grad_U Phi = -G V kappa ... in ODE time (lr = eta / (kappa d))
        G = aim.population_gradient(kappa * U @ V.T, T, "he2")
        return -G @ V, -G.T @ U

    U, V = U0.clone(), V0.clone()
    dt = 0.01
    for _ in range(20):
        k1 = rhs(U, V)
        k2 = rhs(U + dt / 2 * k1[0], V + dt / 2 * k1[1])
        k3 = rhs(U + dt / 2 * k2[0], V + dt / 2 * k2[1])
        k4 = rhs(U + dt * k3[0], V + dt * k3[1])
        U = U + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        V = V + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    assert float((S[-1] - kappa * U @ V.T).abs().max()) < 1e-8


def test_truncation_error_falls_with_order():
    errs = aim.truncation_errors((1, 2, 3, 4, 5), points=120, dt=0.02)
    values = [errs[m] for m in (1, 2, 3, 4, 5)]
    assert all(b < a / 2 for a, b in zip(values, values[1:])), errs
    assert errs[4] < 5e-3, errs


def test_spectral_closure_matches_matrix_flow():
    # For S0 = eps I commuting with the teacher, the exact closure equals the tied matrix gradient flow (Gaussian part).
    d = 8
    g = torch.Generator().manual_seed(11)
    W = torch.randn(d, d // 2, generator=g, dtype=D)
    T = W @ W.T / d
    sigma = torch.linalg.eigvalsh(T)
    weights = torch.full_like(sigma, 1 / d)
    times, loss = aim.spectral_closure(sigma, weights, 0.05, link="he2", t=2.0, dt=0.01)
    _, S = aim.gradient_flow(T, 0.05 * torch.eye(d, dtype=D), link="he2", parameterization="tied", t=2.0, dt=0.01,
                             exact=False)
    flow = aim.population_loss(S, T, "he2", exact=False)
    assert float((loss - flow).abs().max()) < 1e-10


def test_direct_he2_from_zero_stays_zero_and_tied_escapes():
    d, eta = 20, 0.02
    g = torch.Generator().manual_seed(5)
    W = torch.randn(d, d // 2, generator=g, dtype=D)
    T = W @ W.T
    T = T / ((T * T).sum() / d).sqrt()  # rho = 1, PSD teacher (tied students are PSD)
    stuck = aim.online_sgd(T, link="he2", parameterization="direct", S0=torch.zeros(d, d, dtype=D), steps=2000,
                           eta=eta, runs=2, record_every=1000)
    assert bool((stuck.S == 0).all()) and bool(torch.isinf(stuck.escape_time).all())
    steps = int(0.6 * d * d / eta)
    run = aim.online_sgd(T, link="he2", parameterization="tied", steps=steps, eta=eta, runs=2, clip=2.0,
                         record_every=200, seed=1, init_scale=0.5)
    assert bool(torch.isfinite(run.escape_time).all()), run.escape_time
    assert float(run.order["cos_c"][0].abs().max()) < 0.3 and bool(aim.weak_recovery(run.S, T, "he2").all())


def test_errors():
    with pytest.raises(ArgumentError, match="parameterization"):
        aim.online_sgd(torch.eye(3), parameterization="lora")
    with pytest.raises(ArgumentError, match="link"):
        aim.population_loss(torch.eye(3), torch.eye(3), "relu")
    with pytest.raises(ArgumentError, match="A0"):
        aim.gradient_flow(torch.eye(3), torch.eye(3), parameterization="untied")
