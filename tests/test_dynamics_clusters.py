import math

import pytest
import torch

import jacobiscope
from jacobiscope.dynamics.clusters import TokenOrderParameters, leading_axis_rotation, token_order_parameters
from jacobiscope.errors import ArgumentError, StateError


def _random_rotation(d, seed, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=dtype))
    return q


def test_identical_tokens_form_one_cluster_on_one_axis():
    u = torch.tensor([0.6, -0.8, 0.0, 0.0], dtype=torch.float64)
    x = torch.stack([s * u for s in (1.0, 2.0, 0.5, 3.0, 7.0)])  # same direction, different lengths
    p = token_order_parameters(x)
    assert isinstance(p, TokenOrderParameters)
    assert abs(float(p.top_eigenvalue) - 1.0) < 1e-14
    assert abs(float(p.participation_ratio) - 1.0) < 1e-14
    assert float(p.effective_clusters) == float(p.participation_ratio)
    assert int(p.cluster_count) == 1 and int(p.signed_cluster_count) == 1
    assert abs(float(p.nematic_order) - 1.0) < 1e-14 and abs(float(p.polar_order) - 1.0) < 1e-14
    # Sign fixed by the largest-magnitude entry (-0.8), so the axis is -u.
    assert torch.allclose(p.leading_axis, -u, atol=1e-14)
    assert p.tokens == 5 and p.dim == 4 and p.eigenvalues.shape == (4,)


@pytest.mark.parametrize("d", [2, 5, 8])
def test_orthonormal_basis_is_isotropic_with_d_clusters(d):
    x = 3.0 * _random_rotation(d, seed=d)  # rows: an orthonormal basis, rotated away from the axes, scaled
    p = token_order_parameters(x)
    assert abs(float(p.top_eigenvalue) - 1.0 / d) < 1e-13
    assert torch.allclose(p.eigenvalues, torch.full((d,), 1.0 / d, dtype=torch.float64), atol=1e-13)
    assert abs(float(p.participation_ratio) - d) < 1e-11
    assert int(p.cluster_count) == d and int(p.signed_cluster_count) == d
    assert abs(float(p.nematic_order)) < 1e-12


def test_antipodal_and_orthogonal_groups():
    # 3 tokens at +u, 2 at -u, 2 at +v, 1 at -v (u ⟂ v), each jittered by ~1e-3 rad: 2 axes, 4 signed clusters.
    q = _random_rotation(6, seed=1)
    u, v = q[0], q[1]
    generator = torch.Generator().manual_seed(2)
    base = torch.stack([u, u, u, -u, -u, v, v, -v])
    x = base + 1e-3 * torch.randn(base.shape, generator=generator, dtype=torch.float64)
    p = token_order_parameters(x)
    assert int(p.cluster_count) == 2
    assert int(p.signed_cluster_count) == 4
    # lambda = (5/8, 3/8) up to the jitter: PR = 1 / (25/64 + 9/64) = 64/34.
    assert abs(float(p.top_eigenvalue) - 5 / 8) < 1e-5
    assert abs(float(p.eigenvalues[1]) - 3 / 8) < 1e-5
    assert abs(float(p.participation_ratio) - 64 / 34) < 1e-4
    assert abs(abs(float(p.leading_axis @ u)) - 1.0) < 1e-5
    # Polar order only sees the signed imbalance: |(3-2) u + (2-1) v| / 8 = sqrt(2)/8.
    assert abs(float(p.polar_order) - math.sqrt(2) / 8) < 1e-3
    # A looser threshold merges nothing across 90 degrees, a stricter one than the jitter splits every token.
    assert int(token_order_parameters(x, cluster_threshold=0.5).cluster_count) == 2
    assert int(token_order_parameters(x, cluster_threshold=1 - 1e-12).signed_cluster_count) == 8


def test_threshold_links_by_cosine_and_chains_single_linkage():
    def at(angle):
        return torch.tensor([math.cos(angle), math.sin(angle)], dtype=torch.float64)

    pair = torch.stack([at(0.0), at(math.acos(0.995))])
    assert int(token_order_parameters(pair).cluster_count) == 1
    apart = torch.stack([at(0.0), at(math.acos(0.985))])
    assert int(token_order_parameters(apart).cluster_count) == 2
    # A chain of 0.1 rad gaps (cos 0.995 each) spanning 0.5 rad is one cluster: connected components.
    chain = torch.stack([at(0.1 * k) for k in range(6)])
    assert int(token_order_parameters(chain).cluster_count) == 1


def test_d2_top_eigenvalue_is_kuramoto_daido_order_parameter():
    generator = torch.Generator().manual_seed(0)
    for n, spread in ((7, 2 * math.pi), (50, 0.7), (200, 2 * math.pi)):
        theta = spread * torch.rand(n, generator=generator, dtype=torch.float64)
        radius = 0.1 + torch.rand(n, generator=generator, dtype=torch.float64)  # lengths must not matter
        x = torch.stack([theta.cos(), theta.sin()], -1) * radius.unsqueeze(-1)
        p = token_order_parameters(x)
        r2 = torch.exp(2j * theta).mean().abs().item()
        assert abs(2 * float(p.top_eigenvalue) - 1 - r2) < 1e-12
        assert abs(float(p.nematic_order) - r2) < 1e-12
        # And the leading axis points along arg(R_2)/2 (mod pi).
        half_angle = 0.5 * torch.angle(torch.exp(2j * theta).mean()).item()
        axis = torch.tensor([math.cos(half_angle), math.sin(half_angle)], dtype=torch.float64)
        assert abs(abs(float(p.leading_axis @ axis)) - 1.0) < 1e-10


@pytest.mark.parametrize("n, d", [(3, 6), (9, 4)])  # Gram-matrix branch (n <= d) and second-moment branch (n > d)
def test_spectrum_matches_a_direct_second_moment_eigendecomposition(n, d):
    generator = torch.Generator().manual_seed(n * d)
    x = torch.randn(n, d, generator=generator, dtype=torch.float64)
    unit = x / x.norm(dim=-1, keepdim=True)
    M = unit.T @ unit / n
    values, vectors = torch.linalg.eigh(M)
    p = token_order_parameters(x)
    r = min(n, d)
    assert torch.allclose(p.eigenvalues, values.flip(0)[:r], atol=1e-13)
    assert abs(float(p.participation_ratio) - float(1 / (values**2).sum())) < 1e-11
    assert abs(abs(float(p.leading_axis @ vectors[:, -1])) - 1.0) < 1e-12
    assert abs(float(p.leading_axis.norm()) - 1.0) < 1e-14


def test_batched_shapes_token_dim_and_per_element_agreement():
    generator = torch.Generator().manual_seed(5)
    states = torch.randn(3, 2, 5, 4, generator=generator, dtype=torch.float64)  # [T, batch, tokens, dim]
    p = token_order_parameters(states)
    assert p.top_eigenvalue.shape == (3, 2) and p.cluster_count.shape == (3, 2)
    assert p.eigenvalues.shape == (3, 2, 4) and p.leading_axis.shape == (3, 2, 4)
    assert p.cluster_count.dtype == torch.long
    single = token_order_parameters(states[2, 1])
    assert torch.allclose(p.top_eigenvalue[2, 1], single.top_eigenvalue, atol=1e-14)
    assert torch.allclose(p.leading_axis[2, 1], single.leading_axis, atol=1e-12)
    # Features first, tokens last: same numbers.
    swapped = token_order_parameters(states.transpose(-1, -2), token_dim=-1, feature_dim=-2)
    assert torch.allclose(swapped.top_eigenvalue, p.top_eigenvalue, atol=1e-14)
    # Half precision is computed in float32.
    assert token_order_parameters(states.to(torch.bfloat16)).top_eigenvalue.dtype == torch.float32
    record = token_order_parameters(states[0, 0]).as_dict()
    assert isinstance(record["top_eigenvalue"], float) and isinstance(record["cluster_count"], int)
    assert record["effective_clusters"] == record["participation_ratio"]


def test_nonfinite_elements_are_flagged_and_zero_tokens_ignored():
    generator = torch.Generator().manual_seed(6)
    states = torch.randn(3, 4, 3, generator=generator, dtype=torch.float64)
    states[1, 2, 0] = float("nan")
    p = token_order_parameters(states)
    assert math.isnan(float(p.top_eigenvalue[1])) and int(p.cluster_count[1]) == -1
    assert bool(torch.isnan(p.leading_axis[1]).all())
    assert torch.isfinite(p.top_eigenvalue[[0, 2]]).all() and (p.cluster_count[[0, 2]] >= 1).all()
    # An all-zero token has no direction: it changes nothing.
    with_zero = torch.cat([states[0], torch.zeros(1, 3, dtype=torch.float64)])
    q, r = token_order_parameters(states[0]), token_order_parameters(with_zero)
    assert abs(float(q.top_eigenvalue) - float(r.top_eigenvalue)) < 1e-14
    assert int(q.cluster_count) == int(r.cluster_count) and abs(float(q.polar_order) - float(r.polar_order)) < 1e-14


def test_argument_errors_say_what_was_expected():
    with pytest.raises(ArgumentError, match="cluster_threshold"):
        token_order_parameters(torch.randn(4, 3), cluster_threshold=1.0)
    with pytest.raises(StateError, match="floating"):
        token_order_parameters(torch.ones(4, 3, dtype=torch.long))
    with pytest.raises(StateError, match="tokens, dim"):
        token_order_parameters(torch.randn(3))
    with pytest.raises(ArgumentError, match="differ"):
        token_order_parameters(torch.randn(4, 3), token_dim=1, feature_dim=-1)
    with pytest.raises(StateError, match="at least 2 states"):
        leading_axis_rotation(torch.randn(1, 4, 3))


def _rotating_configuration(omegas, T, d=3, dtype=torch.float64):
    """[T, batch, 6 tokens, d]: an axis a(t) = (cos wt, sin wt, 0, ...) with 4 tokens on it (signs mixed) and 2
    tokens on the fixed e_3 axis; lambda_1 = 4/6 is simple, so the leading axis is a(t) exactly."""
    t = torch.arange(T, dtype=dtype).unsqueeze(1)
    w = torch.tensor(omegas, dtype=dtype)
    axis = torch.zeros(T, len(omegas), d, dtype=dtype)
    axis[..., 0], axis[..., 1] = (w * t).cos(), (w * t).sin()
    e3 = torch.zeros(d, dtype=dtype)
    e3[2] = 1.0
    fixed = e3.expand(T, len(omegas), d)
    return torch.stack([axis, -2 * axis, 0.5 * axis, axis, fixed, -fixed], dim=2)


def test_rotation_speed_of_a_rotating_cluster():
    omegas = [0.05, 0.3, 1e-9]
    states = _rotating_configuration(omegas, T=12)
    angles = leading_axis_rotation(states)
    assert angles.shape == (11, 3)
    for j, w in enumerate(omegas):
        # Relative accuracy holds even at 1e-9 rad, where arccos(|<a, b>|) would give ~1e-8 of pure rounding.
        assert torch.allclose(angles[:, j], torch.full((11,), w, dtype=torch.float64), rtol=1e-9, atol=0)
    # Time along another dimension (the result still has time first), and dt turning angles into speeds.
    moved = leading_axis_rotation(states.movedim(0, 1), time_dim=1, dt=0.5)
    assert moved.shape == (11, 3) and torch.allclose(moved, 2 * angles, rtol=1e-12)
    # Sign-blind: a turn by pi - w of an axis is a turn by w.
    flipped = _rotating_configuration([math.pi - 0.2], T=4)
    assert torch.allclose(leading_axis_rotation(flipped), torch.full((3, 1), 0.2, dtype=torch.float64), atol=1e-12)


def test_signed_rotation_tracks_the_mean_direction():
    t = torch.arange(5, dtype=torch.float64)
    angle = 0.9 * t  # large turns: the signed angle, not folded into [0, pi/2]
    mean = torch.stack([angle.cos(), angle.sin()], -1)
    spread = 0.1 * torch.stack([-angle.sin(), angle.cos()], -1)
    states = torch.stack([mean + spread, mean - spread, 2 * mean], dim=1)  # [T, 3 tokens, 2]
    signed = leading_axis_rotation(states, signed=True)
    assert torch.allclose(signed, torch.full((4,), 0.9, dtype=torch.float64), atol=1e-12)
    unsigned = leading_axis_rotation(states)
    assert torch.allclose(unsigned, torch.full((4,), 0.9, dtype=torch.float64), atol=1e-12)  # 0.9 < pi/2
    opposite = torch.stack([states[0], -states[0]])  # the mean flips: pi signed, 0 as an axis
    assert abs(float(leading_axis_rotation(opposite, signed=True)[0]) - math.pi) < 1e-12
    assert abs(float(leading_axis_rotation(opposite)[0])) < 1e-12


def test_order_parameters_along_a_looped_attention_trajectory():
    m = jacobiscope.systems.self_attention_map(tokens=6, dim=4, heads=2, seed=1, dtype=torch.float64)
    states = m.trajectory(m.x0, steps=10)  # [11, 6, 4]
    p = token_order_parameters(states)
    assert p.top_eigenvalue.shape == (11,)
    assert bool(((p.top_eigenvalue >= 0.25 - 1e-12) & (p.top_eigenvalue <= 1 + 1e-12)).all())
    assert bool(((p.participation_ratio >= 1 - 1e-12) & (p.participation_ratio <= 4 + 1e-12)).all())
    assert torch.allclose(p.eigenvalues.sum(-1), torch.ones(11, dtype=torch.float64), atol=1e-12)
    assert bool(((p.cluster_count >= 1) & (p.cluster_count <= p.signed_cluster_count)).all())
    speed = leading_axis_rotation(states)
    assert speed.shape == (10,) and bool(((speed >= 0) & (speed <= math.pi / 2 + 1e-12)).all())


def _reference_components(cosines, threshold):
    """Union-find over the linked pairs: the plain-Python reference for the batched label propagation."""
    n = cosines.shape[0]
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if cosines[i, j] > threshold:
                parent[find(i)] = find(j)
    return len({find(i) for i in range(n)})


def test_cluster_counts_match_union_find_on_random_clouds():
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(6, 40, 3, generator=generator, dtype=torch.float64)  # dense enough for long chains
    p = token_order_parameters(x, cluster_threshold=0.9)
    unit = x / x.norm(dim=-1, keepdim=True)
    for b in range(6):
        cosines = unit[b] @ unit[b].T
        assert int(p.cluster_count[b]) == _reference_components(cosines.abs(), 0.9)
        assert int(p.signed_cluster_count[b]) == _reference_components(cosines, 0.9)
    assert len(set(p.cluster_count.tolist())) > 1  # the clouds really differ


def test_measure_says_why_clusters_are_nan_when_every_token_is_zero():
    # x -> 0.5 x from one token at 1 and one at 0: the tokens shrink but keep their directions (one cluster, top
    # eigenvalue 1 at every loop); x -> 0 from the same start: loop 0 has one cluster, then no token has a direction
    start = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    shrinking = jacobiscope.measure(jacobiscope.LoopedMap(lambda x: 0.5 * x, x0=start), loops=4,
                                    diagnostics=["clusters"])
    assert shrinking.clusters["top_eigenvalue"] == [1.0] * 5 and shrinking.flags == []
    vanished = jacobiscope.measure(jacobiscope.LoopedMap(lambda x: 0.0 * x, x0=start), loops=4,
                                   diagnostics=["clusters"])
    values = vanished.clusters["top_eigenvalue"]
    assert values[0] == 1.0 and all(math.isnan(v) for v in values[1:])
    # one flag, with the cause: not the generic "NaN/Inf in its result ... compute in float64"
    assert [f for f in vanished.flags if f.startswith("clusters")] == [
        "clusters: every token is zero at loop(s) 1, 2, 3, 4 — tokens without a direction have no order "
        "parameters, so those entries are NaN"]
