"""finite_time_exponents: per-start exponents against exact float64 references (a linear map's ||A^T v||, dense
autograd Jacobians along a nonlinear orbit), independence of the starts, the spread shrinking with T."""
import math

import pytest
import torch

import jacobiscope
from jacobiscope.errors import ArgumentError

from conftest import autograd_jacobian


def _matrix(seed=0, size=5):
    """A non-normal matrix with distinct real eigenvalues 1.3, 0.9, 0.6, 0.4, 0.2 (a rotated triangular one)."""
    generator = torch.Generator().manual_seed(seed)
    upper = torch.triu(torch.randn(size, size, generator=generator, dtype=torch.float64), diagonal=1)
    triangular = upper + torch.diag(torch.tensor([1.3, 0.9, 0.6, 0.4, 0.2], dtype=torch.float64)[:size])
    basis, _ = torch.linalg.qr(torch.randn(size, size, generator=generator, dtype=torch.float64))
    return basis @ triangular @ basis.T


def test_linear_map_exponent_of_each_start_is_log_norm_of_the_power():
    A = _matrix()
    x0 = torch.ones(5, dtype=torch.float64)
    for loops in (3, 17):
        ft = jacobiscope.finite_time_exponents(lambda x: A @ x, x0, loops=loops, starts=6, seed=4)
        assert ft.exponents.shape == (6, 1) and ft.history.shape == (loops, 6, 1) and ft.batched
        for start in range(6):
            v = ft.start_frames[start, 0]
            v = v / v.norm()
            expected = [math.log(float((torch.linalg.matrix_power(A, t) @ v).norm())) / t for t in range(1, loops + 1)]
            assert ft.history[:, start, 0].tolist() == pytest.approx(expected, rel=1e-11, abs=1e-13)
            assert float(ft.exponents[start, 0]) == pytest.approx(expected[-1], rel=1e-11, abs=1e-13)


def test_summary_statistics_over_starts():
    A = _matrix(seed=1)
    ft = jacobiscope.finite_time_exponents(lambda x: A @ x, torch.ones(5, dtype=torch.float64), loops=5, starts=5)
    values = [float(v) for v in ft.exponents[:, 0]]
    mean = sum(values) / 5
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 4)
    assert float(ft.mean[0]) == pytest.approx(mean, rel=1e-12)
    assert float(ft.std[0]) == pytest.approx(std, rel=1e-10)
    assert float(ft.minimum[0]) == min(values) and float(ft.maximum[0]) == max(values)
    assert float(ft.spread[0]) == pytest.approx(max(values) - min(values), rel=1e-12)


def test_spread_shrinks_as_loops_grow_and_every_start_finds_the_top_exponent():
    A = _matrix(seed=2)
    x0 = torch.ones(5, dtype=torch.float64)
    stds, means = [], []
    for loops in (4, 16, 64, 256):
        ft = jacobiscope.finite_time_exponents(lambda x: A @ x, x0, loops=loops, starts=8)
        stds.append(float(ft.std[0]))
        means.append(float(ft.mean[0]))
        if loops >= 64:  # independent starts: none is the second column of a joint QR (near log 0.9 < 0)
            assert float(ft.minimum[0]) > (math.log(1.3) + math.log(0.9)) / 2
    assert stds[0] > stds[1] > stds[2] > stds[3]
    assert stds[-1] < stds[0] / 20  # the 1/T decay of a finite-time exponent's start dependence
    assert abs(means[-1] - math.log(1.3)) < 0.02


def test_k_exponents_per_start_follow_their_own_frame():
    A = _matrix(seed=3)
    loops = 9
    ft = jacobiscope.finite_time_exponents(lambda x: A @ x, torch.ones(5, dtype=torch.float64), loops=loops, k=2,
                                           starts=3, seed=7)
    power = torch.linalg.matrix_power(A, loops)
    for start in range(3):
        frame, _ = torch.linalg.qr(ft.start_frames[start].T)  # [5, 2], the orthonormalized start frame
        log_area = 0.5 * math.log(float(torch.linalg.det((power @ frame).T @ (power @ frame))))
        assert float(ft.exponents[start].sum()) == pytest.approx(log_area / loops, rel=1e-10)
        top = math.log(float((power @ frame[:, 0]).norm())) / loops  # the first vector, alone (R_11)
        # The engine sorts a start's exponents by value: R_11's is either of the two at a finite T.
        assert min(abs(float(value) - top) for value in ft.exponents[start]) < 1e-10


def test_nonlinear_orbit_against_dense_autograd_jacobians(attention_map64):
    m = attention_map64
    loops, starts = 6, 3
    ft = jacobiscope.finite_time_exponents(m, m.x0, loops=loops, starts=starts, seed=1)
    states = m.trajectory(m.x0, loops)
    jacobians = [autograd_jacobian(m.step, states[t]) for t in range(loops)]
    for start in range(starts):
        v = ft.start_frames[start, 0].reshape(-1)
        v = v / v.norm()
        total = 0.0
        for J in jacobians:
            v = J @ v
            total += math.log(float(v.norm()))
            v = v / v.norm()
        assert float(ft.exponents[start, 0]) == pytest.approx(total / loops, rel=1e-9)


def test_batched_map_gives_one_estimate_per_trajectory_and_start():
    A, B = _matrix(seed=4), 0.5 * _matrix(seed=5)
    stacked = torch.stack([A, B])

    def step(x):  # two independent linear trajectories, [2, 5]
        return torch.einsum("bij,bj->bi", stacked, x)

    ft = jacobiscope.finite_time_exponents(step, torch.ones(2, 5, dtype=torch.float64), loops=8, starts=4,
                                           batch_dims=1)
    assert ft.exponents.shape == (4, 2, 1) and ft.mean.shape == (2, 1)
    for start in range(4):
        for row, M in enumerate((A, B)):
            v = ft.start_frames[start, 0, row]
            expected = math.log(float((torch.linalg.matrix_power(M, 8) @ (v / v.norm())).norm())) / 8
            assert float(ft.exponents[start, row, 0]) == pytest.approx(expected, rel=1e-10)


def test_step_that_vmap_cannot_batch_runs_start_by_start_with_the_same_numbers():
    A = _matrix(seed=6)

    def branching(x):  # Python control flow on the state: vmap refuses it, a plain jvp does not
        return A @ x if bool(x.norm() > -1.0) else x

    x0 = torch.ones(5, dtype=torch.float64)
    one_by_one = jacobiscope.finite_time_exponents(branching, x0, loops=7, starts=3)
    batched = jacobiscope.finite_time_exponents(lambda x: A @ x, x0, loops=7, starts=3)
    assert not one_by_one.batched and batched.batched
    torch.testing.assert_close(one_by_one.exponents, batched.exponents, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(one_by_one.history, batched.history, rtol=1e-12, atol=1e-14)


def test_float32_start_frames_equal_float64_ones():
    A = _matrix(seed=7)
    x0 = torch.ones(5, dtype=torch.float64)
    double = jacobiscope.finite_time_exponents(lambda x: A @ x, x0, loops=10)
    single = jacobiscope.finite_time_exponents(lambda x: A.float() @ x, x0.float(), loops=10)
    assert torch.equal(double.start_frames, single.start_frames)
    torch.testing.assert_close(single.exponents.double(), double.exponents, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("starts", [1, 0, True, 2.0])
def test_fewer_than_two_starts_is_refused(starts):
    with pytest.raises(ArgumentError, match="starts must be an int >= 2"):
        jacobiscope.finite_time_exponents(lambda x: 0.5 * x, torch.ones(3, dtype=torch.float64), starts=starts)


def test_bad_loops_and_k_are_refused():
    x0 = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ArgumentError, match="loops"):
        jacobiscope.finite_time_exponents(lambda x: 0.5 * x, x0, loops=0)
    with pytest.raises(ArgumentError, match="k=4 tangent vectors cannot exceed"):
        jacobiscope.finite_time_exponents(lambda x: 0.5 * x, x0, k=4)


def test_a_map_that_annihilates_every_tangent_has_exponent_minus_infinity_at_every_start():
    # x -> 0.3 (constant): every start's exponent is -inf exactly, with no spread (-inf - -inf is not NaN here);
    # x -> diag(0.5, 0) x: the top exponent log 0.5 at every start after one loop, the second -inf
    constant = jacobiscope.finite_time_exponents(lambda x: 0.0 * x + 0.3, torch.ones(4, dtype=torch.float64),
                                                 loops=6, starts=5, k=2)
    assert constant.exponents.tolist() == [[-math.inf, -math.inf]] * 5
    assert constant.std.tolist() == [0.0, 0.0] and constant.spread.tolist() == [0.0, 0.0]
    A = torch.diag(torch.tensor([0.5, 0.0], dtype=torch.float64))
    projecting = jacobiscope.finite_time_exponents(lambda x: A @ x, torch.ones(2, dtype=torch.float64), loops=40,
                                                   starts=4, k=2, transient=1)
    assert projecting.exponents[:, 0].tolist() == pytest.approx([math.log(0.5)] * 4, abs=1e-12)
    assert projecting.exponents[:, 1].tolist() == [-math.inf] * 4 and projecting.std[1] == 0
