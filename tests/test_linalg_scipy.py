"""The hand-written Krylov solvers against scipy.sparse.linalg: jacobiscope's restarted Arnoldi (Krylov–Schur,
`jacobian_eigenvalues(method="arnoldi")`) and its Lanczos on J^T J (`spectral_norm`) give the eigenvalues and the
largest singular value that ARPACK / PROPACK (`eigs`, `eigsh`, `svds`) give, on matrices chosen to be hard in
different ways: symmetric, non-normal, complex conjugate spectra, clustered eigenvalues and singular values, and the
Jacobian of a nonlinear map. scipy drives jacobiscope's own `JacobianOperator` (jvp / vjp) through a
`LinearOperator`, so both sides see the same matrix-free operator; a dense LAPACK solve is the third opinion.

Tolerances: in float64 with jacobiscope's default tol (1e-10 relative residual), eigenvalues that are well
conditioned agree to 1e-8 relative and the spectral norm to 1e-10 relative."""
import numpy as np
import pytest
import torch

scipy_linalg = pytest.importorskip("scipy.sparse.linalg")

from jacobiscope import JacobianOperator, jacobian_eigenvalues, spectral_norm  # noqa: E402

N, K = 240, 6
EIG_RTOL, NORM_RTOL = 1e-8, 1e-10


def _rng(seed):
    return np.random.default_rng(seed)


def _orthogonal(n, seed):
    q, r = np.linalg.qr(_rng(seed).standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def _with_spectrum(values, seed, condition=None):
    """A real matrix with these eigenvalues (conjugate pairs given as one complex value): Q B Q^-1 with B block
    diagonal (2 x 2 rotation-scaling blocks for the pairs); Q orthogonal (a normal matrix) or, given ``condition``,
    a well-conditioned non-orthogonal similarity (a non-normal matrix with well-conditioned eigenvalues)."""
    blocks = []
    for value in values:
        if abs(value.imag) > 0:
            blocks.append(np.array([[value.real, value.imag], [-value.imag, value.real]]))
        else:
            blocks.append(np.array([[value.real]]))
    size = sum(len(b) for b in blocks)
    matrix, at = np.zeros((size, size)), 0
    for block in blocks:
        matrix[at:at + len(block), at:at + len(block)] = block
        at += len(block)
    q = _orthogonal(size, seed)
    if condition is None:
        return q @ matrix @ q.T
    similarity = q @ np.diag(np.geomspace(1.0, condition, size)) @ _orthogonal(size, seed + 1)
    return similarity @ matrix @ np.linalg.inv(similarity)


def _symmetric():
    top = np.array([5.0, -4.5, 4.0, 3.6, -3.3, 3.0])
    rest = _rng(1).uniform(-1.0, 1.0, N - K)
    return _with_spectrum(np.concatenate([top, rest]).astype(complex), seed=2)


def _non_normal():
    # Q T Q^T with T upper triangular: the eigenvalues are T's diagonal, but a strictly upper part as large as the
    # diagonal (Henrici departure 0.74) makes J^T J and J J^T differ, the singular values differ from the eigenvalue
    # moduli (||J|| = 3.18 > rho = 3), and the bulk's eigenvectors are nearly parallel (cond(V) ~ 1e15). A random
    # Gaussian matrix would not do: its top moduli crowd the edge of the circular law, where which k are "the
    # largest" is decided by the fourth digit.
    rng = _rng(3)
    diagonal = np.concatenate([[3.0, -2.6, 2.3, 2.0, -1.8, 1.6], rng.uniform(-1.0, 1.0, N - K)])
    q = _orthogonal(N, 12)
    return q @ (np.diag(diagonal) + np.triu(rng.standard_normal((N, N)), 1) / np.sqrt(N)) @ q.T


def _complex_pairs():
    pairs = [1.5 * np.exp(1j * 0.3), 1.3 * np.exp(1j * 2.0), 1.1 * np.exp(1j * 1.0)]  # 3 pairs = the top 6
    rest = list(_rng(4).uniform(-0.8, 0.8, N - K))
    return _with_spectrum(np.array(pairs + rest, dtype=complex), seed=5, condition=10.0)


def _clustered():
    # The top six eigenvalues within 1e-4 of each other, far from the rest: Krylov methods separate them slowly.
    top = 2.0 - 2e-5 * np.arange(K)
    rest = _rng(6).uniform(-1.0, 1.0, N - K)
    return _with_spectrum(np.concatenate([top, rest]).astype(complex), seed=7)


MATRICES = {"symmetric": _symmetric, "non-normal": _non_normal, "complex-pairs": _complex_pairs,
            "clustered": _clustered}


def _start(n=N):
    return _rng(0).standard_normal(n)  # ARPACK's own start vector is random: fixed here, so a run is repeatable


def _operator(step, x):
    """jacobiscope's matrix-free Jacobian as a scipy LinearOperator (jvp for matvec, vjp for rmatvec)."""
    op = JacobianOperator(step, x)

    def apply(product):
        return lambda v: product(torch.from_numpy(np.ascontiguousarray(v).reshape(-1))).numpy()

    return scipy_linalg.LinearOperator((x.numel(), x.numel()), matvec=apply(op.matvec),
                                       rmatvec=apply(op.rmatvec), dtype=np.float64)


def _by_modulus(values):
    values = np.asarray(values, dtype=complex)
    return values[np.lexsort((-values.imag, -np.abs(values)))]


def _relative(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b))))


@pytest.mark.parametrize("name", list(MATRICES))
def test_arnoldi_eigenvalues_agree_with_scipy_eigs_and_lapack(name):
    A = torch.from_numpy(MATRICES[name]())
    step, x = (lambda state: A @ state), torch.zeros(N, dtype=torch.float64)
    ours = jacobian_eigenvalues(step, x, k=K, method="arnoldi")
    assert ours.converged and ours.method == "arnoldi"
    arpack = scipy_linalg.eigs(_operator(step, x), k=K, which="LM", tol=1e-12, v0=_start(), return_eigenvectors=False)
    lapack = _by_modulus(np.linalg.eigvals(A.numpy()))[:K]
    assert _relative(_by_modulus(ours.values.numpy()), _by_modulus(arpack)) < EIG_RTOL
    assert _relative(_by_modulus(ours.values.numpy()), lapack) < EIG_RTOL
    if name == "symmetric":  # the Hermitian solver too: real eigenvalues, the same six
        lanczos = scipy_linalg.eigsh(_operator(step, x), k=K, which="LM", tol=1e-12, v0=_start(), return_eigenvectors=False)
        assert _relative(_by_modulus(ours.values.numpy()), _by_modulus(lanczos)) < EIG_RTOL
        assert np.abs(ours.values.imag.numpy()).max() < 1e-10
    if name == "complex-pairs":  # three conjugate pairs, each listed with its conjugate
        values = _by_modulus(ours.values.numpy())
        np.testing.assert_allclose(values[0::2], values[1::2].conj(), rtol=1e-8)


@pytest.mark.parametrize("name", list(MATRICES))
def test_lanczos_spectral_norm_agrees_with_scipy_svds_and_lapack(name):
    A = torch.from_numpy(MATRICES[name]())
    step, x = (lambda state: A @ state), torch.zeros(N, dtype=torch.float64)
    ours = spectral_norm(step, x)
    assert ours.converged
    arpack = scipy_linalg.svds(_operator(step, x), k=1, tol=1e-12, v0=_start(), return_singular_vectors=False)[0]
    lapack = np.linalg.norm(A.numpy(), 2)
    assert _relative(float(ours.value), arpack) < NORM_RTOL
    assert _relative(float(ours.value), lapack) < NORM_RTOL
    # the returned right vector is the top singular vector (up to sign): |<v, v_lapack>| = 1
    v_true = np.linalg.svd(A.numpy())[2][0]
    assert abs(float(ours.right_vector.numpy() @ v_true)) == pytest.approx(1.0, abs=1e-8)


def test_clustered_singular_values_and_a_nonlinear_jacobian():
    """Six singular values within 1e-6 of each other (power iteration would need millions of steps), and the
    Jacobian diag(1 - tanh^2(W x + b)) W of a nonlinear map at a random state, seen only through jvp / vjp."""
    u, v = _orthogonal(N, 8), _orthogonal(N, 9)
    sigma = np.concatenate([3.0 - 1e-6 * np.arange(K), _rng(10).uniform(0.1, 2.0, N - K)])
    A = torch.from_numpy(u @ np.diag(sigma) @ v.T)
    ours = spectral_norm(lambda state: A @ state, torch.zeros(N, dtype=torch.float64))
    assert ours.converged and _relative(float(ours.value), 3.0) < NORM_RTOL

    rng = _rng(11)
    # a rank-4 part (eigenvalues 4, 3, 2.5, 2 before the tanh's slopes) over a noise bulk of radius ~0.5: the top
    # four of J are well separated (3.85, 2.90, 2.39, 1.88; then 0.5)
    basis, _ = np.linalg.qr(rng.standard_normal((N, 4)))
    noise = rng.standard_normal((N, N)) * 0.5 / np.sqrt(N)
    W = torch.from_numpy(basis @ np.diag([4.0, 3.0, 2.5, 2.0]) @ basis.T + noise)
    b = torch.from_numpy(rng.standard_normal(N) * 0.1)
    step, x = (lambda state: torch.tanh(W @ state + b)), torch.from_numpy(rng.standard_normal(N) * 0.3)
    dense = ((1 - torch.tanh(W @ x + b) ** 2)[:, None] * W).numpy()  # the Jacobian by hand
    values = jacobian_eigenvalues(step, x, k=4, method="arnoldi")
    arpack = scipy_linalg.eigs(_operator(step, x), k=4, which="LM", tol=1e-12, v0=_start(), return_eigenvectors=False)
    assert _relative(_by_modulus(values.values.numpy()), _by_modulus(arpack)) < EIG_RTOL
    assert _relative(_by_modulus(values.values.numpy()), _by_modulus(np.linalg.eigvals(dense))[:4]) < EIG_RTOL
    norm = spectral_norm(step, x)
    svds = scipy_linalg.svds(_operator(step, x), k=1, tol=1e-12, v0=_start(), return_singular_vectors=False)[0]
    assert _relative(float(norm.value), svds) < NORM_RTOL
    assert _relative(float(norm.value), np.linalg.norm(dense, 2)) < NORM_RTOL


@pytest.mark.parametrize("which, scipy_which", [("largest", "LA"), ("smallest", "SA"), ("magnitude", "LM")])
def test_thick_restart_lanczos_of_the_symmetric_part_agrees_with_scipy_eigsh(which, scipy_which):
    """`dynamics.symmetric_eigenpairs`, the other hand-written Krylov solver: S = (J + J^T) / 2 of the non-normal
    matrix, whose spectrum differs from J's, against eigsh on jvp + vjp through a LinearOperator."""
    from jacobiscope.dynamics import symmetric_eigenpairs

    A = torch.from_numpy(_non_normal())
    step, x = (lambda state: A @ state), torch.zeros(N, dtype=torch.float64)
    ours = symmetric_eigenpairs(step, x, k=4, which=which)
    op = _operator(step, x)
    symmetric = scipy_linalg.LinearOperator((N, N), matvec=lambda v: (op.matvec(v) + op.rmatvec(v)) / 2,
                                            dtype=np.float64)
    arpack = scipy_linalg.eigsh(symmetric, k=4, which=scipy_which, tol=1e-12, v0=_start(), return_eigenvectors=False)
    lapack = np.linalg.eigvalsh((A.numpy() + A.numpy().T) / 2)
    expected = {"largest": lapack[::-1][:4], "smallest": lapack[:4], "magnitude": _by_modulus(lapack)[:4].real}[which]
    key = np.abs if which == "magnitude" else (lambda v: v)
    np.testing.assert_allclose(np.sort(key(ours.values.numpy())), np.sort(key(arpack)), rtol=EIG_RTOL)
    np.testing.assert_allclose(np.sort(ours.values.numpy()), np.sort(expected), rtol=EIG_RTOL)


# ------------------------------------------------------------------- the other hand-written numerics scipy covers
def test_the_student_t_table_of_the_regime_interval_matches_scipy():
    """The 95% quantiles behind every lambda_max interval are a table (no scipy at run time): its entries are
    scipy's to the printed 3 decimals, and between entries the next smaller tabulated dof is used, which is wider
    (conservative). Above 30 dof a Cornish-Fisher expansion: within 1e-4 of scipy's t (1.96 alone was up to 4%
    too narrow at dof 31)."""
    stats = pytest.importorskip("scipy.stats")
    from jacobiscope.dynamics._regime_evidence import _T95, t_quantile

    for dof, value in _T95.items():
        assert value == pytest.approx(stats.t.ppf(0.975, dof), abs=5e-4), dof
    for dof in range(1, 31):
        assert t_quantile(dof) >= stats.t.ppf(0.975, dof) - 5e-4, dof
    for dof in (31, 40, 64, 100, 1000, 10**6):
        assert t_quantile(dof) == pytest.approx(stats.t.ppf(0.975, dof), abs=1e-4), dof


def test_token_cluster_counts_are_scipys_connected_components():
    """`token_order_parameters`' clusters (min-label propagation with pointer jumping, batched, on device) are the
    connected components scipy.sparse.csgraph finds in the same |cos| > threshold graph."""
    from scipy.sparse.csgraph import connected_components

    from jacobiscope.dynamics import token_order_parameters

    rng = _rng(13)
    axes = rng.standard_normal((5, 12))
    spread = np.linspace(0.05, 0.5, 16)[:, None, None]  # 16 batches, from tight clusters to crumbled ones
    tokens = axes[rng.integers(0, 5, size=(16, 40))] + spread * rng.standard_normal((16, 40, 12))
    tokens *= rng.choice([-1.0, 1.0], size=(16, 40, 1))  # antipodal tokens: one axis, two point clusters
    result = token_order_parameters(torch.from_numpy(tokens), cluster_threshold=0.9)
    unit = tokens / np.linalg.norm(tokens, axis=-1, keepdims=True)
    cosines = unit @ unit.transpose(0, 2, 1)
    for batch in range(len(tokens)):
        axis_count = connected_components(np.abs(cosines[batch]) > 0.9, directed=False)[0]
        point_count = connected_components(cosines[batch] > 0.9, directed=False)[0]
        assert (int(result.cluster_count[batch]), int(result.signed_cluster_count[batch])) == (axis_count, point_count)
    assert len(set(result.cluster_count.tolist())) > 1  # the batches differ, so the comparison is not vacuous
