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


@pytest.mark.slow  # suite time: a longer end-to-end run (pytest -m slow)
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


# ---------------------------------------------------------------------------------------------------- softmax link
def _softmax_sample_loss(X, S, S_star, centering):
    # Independent of online_sgd's hand-written backward: torch.softmax and autograd on the spec's loss.
    L = X.shape[-2]
    Y = torch.softmax(aim.preactivations(X, S, centering=centering), -1)
    Y_star = torch.softmax(aim.preactivations(X, S_star, centering=centering), -1)
    return ((Y - Y_star) ** 2).sum() / L ** 2


def _initial(param, d, seed):
    g = torch.Generator().manual_seed(seed)
    if param == "direct":
        G = torch.randn(d, d, generator=g, dtype=D)
        return [(G + G.T) / math.sqrt(2 * d)]
    return [0.5 * torch.randn(d, d, generator=g, dtype=D) for _ in range(1 if param == "tied" else 2)]


def _student(param, P, d):
    kappa = 1 / d
    return P[0] if param == "direct" else (kappa * P[0] @ P[0].mT if param == "tied" else kappa * P[0] @ P[1].mT)


def _sgd_kwargs(param, P0):
    return {"S0": P0[0]} if param == "direct" else {"params0": P0[0] if param == "tied" else tuple(P0)}


@pytest.mark.parametrize("param", ["direct", "tied", "untied"])
@pytest.mark.parametrize("centering", [False, True])
def test_softmax_one_sample_gradient_matches_autograd(param, centering):
    d, L = 5, 3
    S_star = _pair(d, 6)[1]
    P0 = _initial(param, d, 4)
    # lr = 1 makes P0 - P1 the one-sample gradient itself, resolved to round-off.
    run = aim.online_sgd(S_star, link="softmax", parameterization=param, steps=1, lr=1.0, seed=9, record_every=1,
                         tokens=L, centering=centering, **_sgd_kwargs(param, P0))
    X = torch.randn(L, d, generator=torch.Generator().manual_seed(9), dtype=D)  # the run's only draw
    P = [p.clone().requires_grad_(True) for p in P0]
    grads = torch.autograd.grad(_softmax_sample_loss(X, _student(param, P, d), S_star, centering), P)
    got = run.params if isinstance(run.params, tuple) else (run.params,)
    for p0, p1, gr in zip(P0, got, grads):
        assert float(gr.abs().max()) > 1e-4  # a non-trivial gradient is being compared
        assert float((p0 - p1 - gr).abs().max()) < 1e-12 * float(gr.abs().max()) + 1e-15, param


@pytest.mark.parametrize("param", ["direct", "tied", "untied"])
def test_softmax_sgd_drift_matches_population_gradient(param):
    # The mean one-step SGD update over many independent samples is the population gradient (chain rule through the
    # parameterization), estimated here by an independent Monte Carlo with its own samples.
    d, runs, samples = 4, 20_000, 200_000
    S_star = _pair(d, 7)[1]
    P0 = _initial(param, d, 5)
    run = aim.online_sgd(S_star, link="softmax", parameterization=param, steps=1, lr=1.0, seed=3, runs=runs,
                         record_every=1, **_sgd_kwargs(param, P0))
    got = run.params if isinstance(run.params, tuple) else (run.params,)
    S0 = _student(param, P0, d)
    Gpop = aim.population_gradient(S0, S_star, "softmax", samples=samples, seed=21) / d  # grad_S Phi
    kappa = 1 / d
    if param == "direct":
        expected = [Gpop]
    elif param == "tied":
        expected = [kappa * (Gpop + Gpop.T) @ P0[0]]
    else:
        expected = [kappa * Gpop @ P0[1], kappa * Gpop.T @ P0[0]]
    for p0, p1, e in zip(P0, got, expected):
        per_run = p0 - p1  # [runs, d, d]: one-sample gradients
        mean, se = per_run.mean(0), per_run.std(0) / math.sqrt(runs)
        z = (mean - e).abs() / (se * math.sqrt(1 + runs / samples))
        assert float(z.max()) < 5.0, (param, float(z.max()))
        assert float(e.norm()) > 10 * float(se.norm())  # the test resolves the drift, not just noise


def test_softmax_population_gradient_is_batched_and_matches_finite_difference():
    d = 3
    S, T = _pair(d, 8)
    G = aim.population_gradient(torch.stack([S, T]), T, "softmax", samples=50_000, seed=2)
    assert G.shape == (2, d, d) and float(G[1].abs().max()) == 0.0  # S = S*: every sample's loss is 0
    E = torch.zeros(d, d, dtype=D)
    E[0, 1] = 1e-6
    fd = (aim.population_loss(S + E, T, "softmax", samples=50_000, seed=2)
          - aim.population_loss(S - E, T, "softmax", samples=50_000, seed=2)) / 2e-6
    assert abs(float(fd) * d - float(G[0, 0, 1])) < 1e-6 * max(1.0, abs(float(fd) * d))


def test_softmax_tied_learns_and_direct_leaves_zero():
    # Softmax has a non-zero first Hermite coefficient, so unlike He2 the zero matrix is not a critical point, and a
    # tied student of a PSD teacher (centred pre-activations: Tr S* = O(d)) learns it.
    d, eta = 12, 0.5
    g = torch.Generator().manual_seed(12)
    W = torch.randn(d, d // 2, generator=g, dtype=D)
    T = W @ W.T
    T = T / ((T * T).sum() / d).sqrt()
    steps = int(3.0 * d * d / eta)
    run = aim.online_sgd(T, link="softmax", parameterization="tied", steps=steps, eta=eta, runs=2, centering=True,
                         record_every=steps // 6, seed=4)
    loss0 = aim.population_loss(aim.online_sgd(T, link="softmax", parameterization="tied", steps=1, eta=eta, runs=2,
                                                centering=True, seed=4).S, T, "softmax", centering=True,
                                 samples=50_000)
    loss1 = aim.population_loss(run.S, T, "softmax", centering=True, samples=50_000)
    assert bool((loss1 < loss0 / 3).all()), (loss0, loss1)
    cos = run.order["cos_c"]
    assert float(cos[0].abs().max()) < 0.3 and float(cos[-1].min()) > 0.8, cos
    assert bool(torch.isfinite(run.escape_time).all())
    direct = aim.online_sgd(T, link="softmax", parameterization="direct", S0=torch.zeros(d, d, dtype=D),
                            steps=200, eta=eta, centering=True)
    assert float(direct.order["cos_c"][-1]) > 0.3


def test_centered_cosine_is_bounded_for_non_symmetric_students():
    g = torch.Generator().manual_seed(13)
    d = 6
    S = torch.randn(50, d, d, generator=g, dtype=D)
    T = _pair(d, 14)[0]
    T = T + T.T
    c = aim.centered_cosine(S, T)
    assert float(c.abs().max()) <= 1 + 1e-12
    Ssym = S + S.mT  # symmetric: equals the spec's tau(S~ S~*) / sqrt(tau(S~^2) tau(S~*^2))
    eye = torch.eye(d, dtype=D)
    a = Ssym - Ssym.diagonal(dim1=-2, dim2=-1).mean(-1)[:, None, None] * eye
    b = T - T.diagonal().mean() * eye
    tr = lambda M: M.diagonal(dim1=-2, dim2=-1).sum(-1)  # noqa: E731
    spec = tr(a @ b) / (tr(a @ a) * tr(b @ b)).sqrt()
    assert float((aim.centered_cosine(Ssym, T) - spec).abs().max()) < 1e-12


def test_softmax_errors():
    with pytest.raises(ArgumentError, match="softmax"):
        aim.online_sgd(torch.eye(3), link="he2", tokens=3)
    with pytest.raises(ArgumentError, match="params0"):
        aim.online_sgd(torch.eye(3), parameterization="untied", params0=torch.zeros(3, 3))
    with pytest.raises(ArgumentError, match="S0"):
        aim.online_sgd(torch.eye(3), parameterization="tied", S0=torch.zeros(3, 3))
    with pytest.raises(ArgumentError, match="softmax"):
        aim.gradient_flow(torch.eye(3), torch.eye(3), link="softmax")
    with pytest.raises(ArgumentError, match="link"):
        aim.online_sgd(torch.eye(3), link="relu")


def test_he3_drift_at_zero_is_finite_d():
    # At S = 0 the Gaussian-limit He3 gradient is Phi_m S* = 3 (rho - 1) S* (0 at rho = 1: "stuck"), but the exact
    # one-sample mean is G = 3 (rho - 1) S* + (6/d) S* S*^T S* (Wick over x1, then x2): a finite-d drift towards
    # -S*^3, which is what small-d SGD follows. Independent check: the mean of many one-sample gradients.
    d, runs = 6, 200_000
    T = aim.make_teacher(d, "goe", seed=3)
    run = aim.online_sgd(T, link="he3", parameterization="direct", S0=torch.zeros(d, d, dtype=D), steps=1, lr=1.0,
                         runs=runs, record_every=1, seed=2)
    per_run = -run.S  # [runs, d, d]: the one-sample gradients (lr = 1)
    mean, se = per_run.mean(0), per_run.std(0) / math.sqrt(runs)
    rho = float(aim.order_parameters(T, T)["rho"])
    G = 3 * (rho - 1) * T + 6 / d * T @ T.T @ T
    assert abs(rho - 1) < 1e-12 and float(((mean - G / d) / se).abs().max()) < 5
    assert float((G / d).norm()) > 5 * float(se.norm())  # the drift is resolved, not noise


@pytest.mark.parametrize("call, problem", [
    pytest.param(lambda S: aim.gradient_flow(S, S, t=math.nan), r"t must be a finite number in \(0, inf\), got nan",
                 id="flow-t-nan"),
    pytest.param(lambda S: aim.gradient_flow(S, S, dt=0.0), r"dt must be a finite number in \(0, inf\), got 0.0",
                 id="flow-dt-zero"),
    pytest.param(lambda S: aim.gradient_flow(S, torch.eye(3, dtype=torch.float64)),
                 r"S0 must be \[\.\.\., 8, 8\] like the teacher, got \(3, 3\)", id="flow-S0-size"),
    pytest.param(lambda S: aim.gradient_flow(torch.full_like(S, math.nan), S), "S_star holds 64 NaN/Inf entries",
                 id="flow-teacher-nan"),
    pytest.param(lambda S: aim.online_sgd(S, eta=math.nan, steps=4), "eta must be a finite number", id="sgd-eta-nan"),
    pytest.param(lambda S: aim.online_sgd(S, steps=4, recovery_threshold=2.0),
                 r"recovery_threshold must be a finite number in \(0, 1\)", id="sgd-threshold"),
    pytest.param(lambda S: aim.online_sgd(S, steps=4, init_scale=-1.0), "init_scale must be a finite number",
                 id="sgd-init-scale"),
    pytest.param(lambda S: aim.escape_runs(S, runs=0), "runs must be a positive int, got 0", id="escape-runs-zero"),
    pytest.param(lambda S: aim.escape_runs(S, t=-1.0), "t must be a finite number", id="escape-t-negative"),
    pytest.param(lambda S: aim.weak_recovery(torch.eye(3, dtype=torch.float64), S), "S must be", id="recovery-size"),
    pytest.param(lambda S: aim.population_loss(S, S, "softmax", samples=0), "samples must be a positive int",
                 id="softmax-loss-no-samples"),
])
def test_hostile_values_are_refused_before_any_flow_or_sample(call, problem):
    # each of these reached int(nan), a division by zero, a shape mismatch deep in the model, or a NaN run
    with pytest.raises(ArgumentError, match=problem):
        call(aim.make_teacher(8))
