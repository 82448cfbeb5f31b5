"""The symmetric part ``S = (J + J^T) / 2`` of a loop's Jacobian: its top eigenpairs (matrix-free), the state's
overlap with them along the loop, and the pseudo-energy split into its attention and injection parts.

Example::

    >>> import torch, jacobiscope
    >>> m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, dtype=torch.float64)
    >>> pairs = jacobiscope.dynamics.symmetric_eigenpairs(m, m.x0, k=2)
    >>> pairs.values.shape, pairs.vectors.shape, pairs.overlaps(m.x0).shape
    (torch.Size([2]), torch.Size([2, 4, 6]), torch.Size([2]))

The pseudo-energy ``E = -Tr(X^T Y)`` is, near a state, roughly a quadratic form of ``S``; a loop that behaves like
power iteration on ``S`` turns its state toward the top eigenvectors, which the overlaps measure.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch

from ..errors import ArgumentError, ConvergenceWarning, NonFiniteWarning, StateError
from ..linalg.operators import JacobianOperator, check_map_at
from ..maps import LoopedMap, as_looped_map, require_precision, steps_per_loop
from .._validation import nonnegative_int, seed_int, tolerance, within_budget
from ._anatomy import read_anatomy
from ._submaps import drive_map
from .energy import pseudo_energy

__all__ = ["SymmetricEigenResult", "symmetric_eigenpairs", "LoopOverlaps", "symmetric_overlap_along_loop",
           "EnergySplit", "energy_split"]

_WHICH = ("largest", "smallest", "magnitude")


@dataclass
class SymmetricEigenResult:
    """What `symmetric_eigenpairs` returns.

    Attributes:
        values: eigenvalues of ``S = (J + J^T) / 2``, ``[*batch, k]``, in the order ``which`` asks for.
        vectors: unit eigenvectors (per trajectory), ``[k, *batch, *state]`` (the block layout of
            `jacobiscope.JacobianOperator`); each is defined up to its sign.
        residuals: ``||S v - lambda v|| / ||S||_est`` per pair, measured with fresh products after the iteration
            (``||S||_est``: the largest Ritz value in modulus), ``[*batch, k]``.
        converged: whether every pair met ``tol``.
        which: ``"largest"`` (algebraic), ``"smallest"`` or ``"magnitude"``.
        batch_dims: how many leading dimensions of a state index trajectories.
        restarts, matvecs: thick restarts used, and products ``S v`` (each one jvp and one vjp).
    """

    values: torch.Tensor
    vectors: torch.Tensor
    residuals: torch.Tensor
    converged: bool
    which: str
    batch_dims: int
    restarts: int = 0
    matvecs: int = 0
    meta: dict = field(default_factory=dict)

    def overlaps(self, states: torch.Tensor) -> torch.Tensor:
        """``|<x, v_i>| / ||x||`` for one state ``[*batch, *state]`` or several ``[T, *batch, *state]`` (the inner
        product per trajectory): ``[*batch, k]`` or ``[T, *batch, k]``."""
        return eigenvector_overlaps(states, self.vectors, self.batch_dims)


def eigenvector_overlaps(states: torch.Tensor, vectors: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """``|<x, v_i>| / ||x||`` per trajectory for states ``[*lead, *batch, *state]`` and unit vectors
    ``[k, *batch, *state]``: ``[*lead, *batch, k]``."""
    if not isinstance(states, torch.Tensor) or states.dim() < vectors.dim() - 1 or (
            states.shape[states.dim() - vectors.dim() + 1:] != vectors.shape[1:]):
        got = tuple(states.shape) if isinstance(states, torch.Tensor) else type(states).__name__
        raise StateError(f"states must end with the eigenvectors' shape {tuple(vectors.shape[1:])} ([*batch, *state], "
                         f"optionally with leading loop dims), got {got} — pass states of the map the eigenpairs "
                         "were computed for.")
    k = vectors.shape[0]
    batch_shape = vectors.shape[1 : 1 + batch_dims]
    lead_shape = states.shape[: states.dim() - vectors.dim() + 1]
    batch = int(torch.Size(batch_shape).numel())
    flat_states = states.reshape(-1, batch, vectors[0].numel() // max(batch, 1)).to(vectors.dtype)
    flat_vectors = vectors.reshape(k, batch, -1)
    dots = torch.einsum("lbd,kbd->lbk", flat_states, flat_vectors).abs()
    overlaps = dots / flat_states.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(vectors.dtype).tiny)
    return overlaps.reshape(*lead_shape, *batch_shape, k)


def symmetric_eigenpairs(looped_map: LoopedMap, x: torch.Tensor | None = None, k: int = 4, *, which: str = "largest",
                         tol: float | None = None, krylov_dim: int | None = None, max_restarts: int = 100,
                         seed: int = 0) -> SymmetricEigenResult:
    """The top-``k`` eigenpairs of the symmetric part ``S = (J + J^T) / 2`` of the loop's Jacobian at ``x``.

    Example::

        >>> import torch, jacobiscope
        >>> A = torch.tensor([[2.0, 2.0], [0.0, -1.0]], dtype=torch.float64)   # S = [[2, 1], [1, -1]]
        >>> pairs = jacobiscope.dynamics.symmetric_eigenpairs(lambda x: A @ x, torch.zeros(2, dtype=torch.float64), k=1)
        >>> round(float(pairs.values[0]), 6) == round((1 + 13 ** 0.5) / 2, 6)
        True

    Arguments:
        looped_map: a `LoopedMap` or a callable; a batched map gives one set of pairs per trajectory.
        x: the state (default: the map's ``x0``).
        k: how many pairs.
        which: ``"largest"`` (default: largest algebraic values, the directions ``S`` stretches most),
            ``"smallest"`` or ``"magnitude"``.
        tol: residual ``||S v - lambda v||`` relative to ``||S||`` (default ``1e-10`` in float64, ``1e-5`` in float32).
        krylov_dim: Lanczos basis size (default ``max(2k + 1, k + 20)``, capped at the state size).
        max_restarts: thick-restart cap; a `ConvergenceWarning` says when it was hit.
        seed: seed of the random start vector.

    Matrix-free: ``S v = (J v + J^T v) / 2`` costs one jvp and one vjp; Lanczos with full reorthogonalization and
    thick restarts (the symmetric case of Stewart's Krylov-Schur), all trajectories at once. The Jacobian is never
    formed.
    """
    if which not in _WHICH:
        raise ArgumentError(f"which must be one of {_WHICH}, got {which!r} — pass which='largest'.")
    tol = tolerance(tol, "tol")
    max_restarts = nonnegative_int(max_restarts, "max_restarts")
    if max_restarts:
        within_budget(max_restarts, "max_restarts", "iterations", unit="restarts")
    seed = seed_int(seed)
    looped_map = as_looped_map(looped_map).detached()
    x = looped_map.prepare_state(x)
    require_precision(x, "symmetric_eigenpairs")
    size = looped_map.state_size(x)
    k = within_budget(k, "k", "eigen_k", unit="eigenpairs")
    if k > size:
        raise ArgumentError(f"k={k} is larger than the state size D={size} — pass k <= {size}.")
    m = _krylov_size(krylov_dim, k, size)
    if tol is None:
        tol = 1e-10 if x.dtype == torch.float64 else 1e-5
    with torch.no_grad():
        check_map_at(looped_map, x, "symmetric_eigenpairs", reverse=True)
        return _solve(looped_map, x, k, which, tol, m, max_restarts, seed)


def _krylov_size(krylov_dim, k: int, size: int) -> int:
    if krylov_dim is not None and (isinstance(krylov_dim, bool) or not isinstance(krylov_dim, int) or krylov_dim <= k):
        raise ArgumentError(f"krylov_dim must be None or an int > k={k}, got {krylov_dim!r} — pass "
                            "krylov_dim=None for the default max(2k + 1, k + 20).")
    return min(krylov_dim or max(2 * k + 1, k + 20), size)


class _SymmetricProducts:
    """``V -> S V`` for per-trajectory blocks ``[batch, D]``; a NaN/Inf product flags its trajectory and is zeroed."""

    def __init__(self, looped_map, x):
        self.operator = JacobianOperator(looped_map, x)
        self.x = x
        self.batch = int(looped_map.batch_shape(x).numel())
        self.nonfinite = torch.zeros(self.batch, dtype=torch.bool, device=x.device)
        self.count = 0

    def __call__(self, V: torch.Tensor) -> torch.Tensor:
        v = V.reshape(self.x.shape)
        product = (0.5 * (self.operator.matvec(v) + self.operator.rmatvec(v))).reshape(self.batch, -1)
        self.count += 1
        bad = ~torch.isfinite(product).all(1)
        if bool(bad.any()):
            self.nonfinite |= bad
            product = torch.where(bad.unsqueeze(1), torch.zeros_like(product), product)
        return product

    def block(self, vectors: torch.Tensor) -> torch.Tensor:
        """``S`` applied to ``[k, *batch, *state]`` (k jvps and k vjps, vmapped)."""
        self.count += vectors.shape[0]
        return 0.5 * (self.operator.matmat(vectors) + self.operator.rmatmat(vectors))


def _solve(looped_map, x, k, which, tol, m, max_restarts, seed) -> SymmetricEigenResult:
    apply = _SymmetricProducts(looped_map, x)
    batch, size = apply.batch, looped_map.state_size(x)
    generator = torch.Generator(device=x.device).manual_seed(seed)
    values, vectors, restarts, converged = _thick_restart_lanczos(apply, batch, size, k, which, tol, m, max_restarts,
                                                                   x.dtype, x.device, generator)
    vectors = vectors.transpose(0, 1).reshape(k, *x.shape)  # [batch, k, D] -> the block layout [k, *batch, *state]
    residuals = _true_residuals(apply, values, vectors, batch)
    batch_shape = looped_map.batch_shape(x)
    values, residuals = values.reshape(*batch_shape, k), residuals.reshape(*batch_shape, k)
    if bool(apply.nonfinite.any()):
        values, residuals = _flag_nonfinite(looped_map, apply.nonfinite, values, residuals, batch_shape, k)
        converged = False
    if not converged:
        largest = float(residuals.nan_to_num(0).max())
        warnings.warn(f"symmetric_eigenpairs reached max_restarts={max_restarts} before all {k} pairs met "
                      f"tol={tol:.1e} (largest residual {largest:.1e}); raise max_restarts or krylov_dim.",
                      ConvergenceWarning, stacklevel=3)
    return SymmetricEigenResult(
        values=values, vectors=vectors, residuals=residuals, converged=converged, which=which,
        batch_dims=looped_map.batch_dims, restarts=restarts, matvecs=apply.count,
        meta={"map": looped_map.name, "dtype": str(x.dtype), "device": str(x.device), "state_size": size,
              "krylov_dim": m, "tol": tol})


def _flag_nonfinite(looped_map, bad, values, residuals, batch_shape, k):
    warnings.warn(f"symmetric_eigenpairs: the Jacobian of '{looped_map.name}' is NaN/Inf at this state for "
                  f"{int(bad.sum())} of {bad.numel()} trajectories (the map overflows nearby); their values are NaN.",
                  NonFiniteWarning, stacklevel=4)
    mask = bad.reshape(*batch_shape, 1)
    nan = torch.tensor(float("nan"), dtype=values.dtype, device=values.device)
    return torch.where(mask, nan, values), torch.where(mask, nan, residuals)


def _order(theta: torch.Tensor, which: str) -> torch.Tensor:
    """Column order of ascending ``eigh`` values ``[batch, m]`` for ``which``."""
    if which == "largest":
        return torch.argsort(theta, dim=-1, descending=True)
    if which == "smallest":
        return torch.argsort(theta, dim=-1)
    return torch.argsort(theta.abs(), dim=-1, descending=True)


def _thick_restart_lanczos(apply, batch, size, k, which, tol, m, max_restarts, dtype, device, generator):
    """Returns (values [batch, k], vectors [batch, k, D], restarts, converged)."""
    V = torch.zeros(batch, m + 1, size, dtype=dtype, device=device)
    H = torch.zeros(batch, m + 1, m, dtype=dtype, device=device)
    start = torch.randn(batch, size, generator=generator, dtype=dtype, device=device)
    V[:, 0] = start / start.norm(dim=1, keepdim=True)
    kept = 0
    for restart in range(max_restarts + 1):
        for j in range(kept, m):
            _extend(apply, V, H, j, size, generator)
        T = 0.5 * (H[:, :m, :m] + H[:, :m, :m].transpose(1, 2))  # symmetric up to rounding: make it exactly so
        theta, Y = torch.linalg.eigh(T)
        order = _order(theta, which)
        theta, Y = torch.gather(theta, 1, order), torch.gather(Y, 2, order.unsqueeze(1).expand_as(Y))
        coupling = torch.einsum("bm,bmi->bi", H[:, m, :m], Y)  # the Ritz pairs' residual norms ||S y - theta y||
        scale = theta.abs().max(1, keepdim=True).values.clamp_min(torch.finfo(dtype).tiny)
        converged = bool((coupling[:, :k].abs() <= tol * scale).all()) or m == size
        if converged or restart == max_restarts:
            return theta[:, :k], torch.einsum("bmd,bmi->bid", V[:, :m], Y[:, :, :k]), restart, converged
        # Keep more Ritz vectors than wanted: the extra ones speed the wanted ones up.
        kept = min(k + (m - k) // 2, m - 1)
        W = Y[:, :, :kept]
        H_new = torch.zeros_like(H)
        H_new[:, :kept, :kept] = torch.diag_embed(theta[:, :kept])
        H_new[:, kept, :kept] = coupling[:, :kept]
        V_new = torch.zeros_like(V)
        V_new[:, :kept] = torch.einsum("bmd,bmi->bid", V[:, :m], W)
        V_new[:, kept] = V[:, m]
        V, H = V_new, H_new
    raise AssertionError("unreachable")


def _extend(apply, V, H, j, size, generator) -> None:
    """One Lanczos step with full reorthogonalization (two Gram-Schmidt passes): column ``j`` of ``H``, vector
    ``j + 1`` of ``V``. A trajectory whose Krylov space is exhausted continues in its orthogonal complement."""
    w = apply(V[:, j])
    basis = V[:, : j + 1]
    coefficients = torch.zeros(w.shape[0], j + 1, dtype=w.dtype, device=w.device)
    for _ in range(2):
        correction = torch.einsum("bjd,bd->bj", basis, w)
        w = w - torch.einsum("bjd,bj->bd", basis, correction)
        coefficients = coefficients + correction
    H[:, : j + 1, j] = coefficients
    beta = w.norm(dim=1)
    eps = torch.finfo(w.dtype).eps
    exhausted = beta <= 10 * eps * H[:, : j + 2, : j + 1].flatten(1).norm(dim=1).clamp_min(eps)
    H[:, j + 1, j] = torch.where(exhausted, torch.zeros_like(beta), beta)
    V[:, j + 1] = w / beta.clamp_min(torch.finfo(w.dtype).tiny).unsqueeze(1)
    if bool(exhausted.any()):
        fresh = torch.zeros_like(w) if j + 1 >= size else _orthogonal_random(basis, w, generator)
        V[:, j + 1] = torch.where(exhausted.unsqueeze(1), fresh, V[:, j + 1])


def _orthogonal_random(basis, like, generator):
    w = torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)
    for _ in range(2):
        w = w - torch.einsum("bjd,bj->bd", basis, torch.einsum("bjd,bd->bj", basis, w))
    return w / w.norm(dim=1, keepdim=True).clamp_min(torch.finfo(like.dtype).tiny)


def _true_residuals(apply, values, vectors, batch) -> torch.Tensor:
    """``||S v - lambda v|| / max|lambda|`` per pair, ``[batch, k]``, with fresh products."""
    k = vectors.shape[0]
    products = apply.block(vectors).reshape(k, batch, -1)
    flat = vectors.reshape(k, batch, -1)
    difference = products - values.transpose(0, 1).unsqueeze(-1) * flat
    scale = values.abs().max(1).values.clamp_min(torch.finfo(values.dtype).tiny)
    return (difference.norm(dim=-1) / scale.unsqueeze(0)).transpose(0, 1)


# ------------------------------------------------------------------------------------------- along the loop
@dataclass
class LoopOverlaps:
    """What `symmetric_overlap_along_loop` returns; rows are the loop states ``x_0 .. x_T``.

    Attributes:
        values: the top-k eigenvalues of ``S`` at each state, ``[T + 1, *batch, k]``.
        own: ``|<x_t, v_i(x_t)>| / ||x_t||``, the state against its own eigenvectors, ``[T + 1, *batch, k]``.
        fixed: ``|<x_t, v_i(x_ref)>| / ||x_t||``, against the eigenvectors at loop ``reference``.
        reference: the loop whose eigenvectors ``fixed`` uses.
        chance: the mean overlap of a state with a random direction, ``E|<u, e>|`` for ``u`` uniform on the unit
            sphere of the state's dimension (about ``sqrt(2 / (pi D))``): the level an unrelated direction reaches.
        converged: whether every eigen solve converged.
    """

    values: torch.Tensor
    own: torch.Tensor
    fixed: torch.Tensor
    reference: int
    chance: float
    converged: bool
    meta: dict = field(default_factory=dict)


def symmetric_overlap_along_loop(looped_map: LoopedMap, x0: torch.Tensor | None = None, loops: int = 16, k: int = 4, *,
                                 reference: int | None = None, which: str = "largest", tol: float | None = None,
                                 krylov_dim: int | None = None, max_restarts: int = 100,
                                 seed: int = 0) -> LoopOverlaps:
    """How much of the state lies along the top eigenvectors of ``S = (J + J^T) / 2``, loop after loop.

    Example::

        >>> import torch, jacobiscope
        >>> m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, dtype=torch.float64)
        >>> along = jacobiscope.dynamics.symmetric_overlap_along_loop(m, loops=3, k=2)
        >>> along.own.shape, along.reference
        (torch.Size([4, 2]), 3)

    Arguments:
        looped_map, x0: the map and the initial state (default: the map's ``x0``).
        loops: loops to run; states ``x_0 .. x_loops`` are measured.
        k, which, tol, krylov_dim, max_restarts, seed: as in `symmetric_eigenpairs`, at every state.
        reference: the loop whose eigenvectors every state is compared with (default: the last, ``loops``;
            negative counts from the end).

    Each state costs one `symmetric_eigenpairs` solve.
    """
    loops = within_budget(loops, "loops", per_unit=steps_per_loop(looped_map), unit="loops of the step")
    reference = _reference_loop(reference, loops)
    looped_map = as_looped_map(looped_map)
    states = looped_map.trajectory(x0, loops, on_nonfinite="raise")
    options = {"k": k, "which": which, "tol": tol, "krylov_dim": krylov_dim, "max_restarts": max_restarts,
               "seed": seed}
    solves = [symmetric_eigenpairs(looped_map, state, **options) for state in states]
    size = looped_map.state_size(states[0])
    return LoopOverlaps(
        values=torch.stack([solve.values for solve in solves]),
        own=torch.stack([solve.overlaps(state) for solve, state in zip(solves, states)]),
        fixed=solves[reference].overlaps(states), reference=reference, chance=_random_overlap(size),
        converged=all(solve.converged for solve in solves),
        meta={"map": looped_map.name, "state_size": size, "loops": loops, "which": which},
    )


def _reference_loop(reference, loops: int) -> int:
    if reference is None:
        return loops
    if isinstance(reference, bool) or not isinstance(reference, int) or not -(loops + 1) <= reference <= loops:
        raise ArgumentError(f"reference must be a loop index in 0..{loops} (negative from the end), got "
                            f"{reference!r} — pass e.g. reference={loops} (the last state).")
    return reference % (loops + 1)


def _random_overlap(size: int) -> float:
    """``E|u_1|`` for ``u`` uniform on the unit sphere of ``R^size``: ``Gamma(D/2) / (sqrt(pi) Gamma((D+1)/2))``."""
    return math.exp(math.lgamma(size / 2) - math.lgamma((size + 1) / 2)) / math.sqrt(math.pi)


# ---------------------------------------------------------------------------------------------- energy split
@dataclass
class EnergySplit:
    """What `energy_split` returns.

    Attributes:
        total: the pseudo-energy ``-Tr(X^T Y)`` (`jacobiscope.pseudo_energy`), ``[*lead, *batch]``.
        parts: part name -> ``-Tr(X^T Y_part)``, same shape; they sum to ``total`` (``"attention"``,
            ``"injection"``, and ``"mlp"`` for an ItrSA model with one).
        injection: what the injection part is for this map.
    """

    total: torch.Tensor
    parts: dict
    injection: str
    meta: dict = field(default_factory=dict)


def energy_split(states: torch.Tensor, looped_map: LoopedMap) -> EnergySplit:
    """The pseudo-energy ``E = -Tr(X^T Y)`` split into the drive's parts: ``-Tr(X^T Attn(X)) - Tr(X^T C)``.

    Example::

        >>> import torch, jacobiscope
        >>> m = jacobiscope.systems.self_attention_map(tokens=4, dim=6, heads=2, injection=True)
        >>> split = jacobiscope.dynamics.energy_split(m.trajectory(steps=3), m)
        >>> sorted(split.parts), split.total.shape
        (['attention', 'injection'], torch.Size([4]))

    Arguments:
        states: one state ``[*batch, *state]`` or a trajectory ``[T, *batch, *state]`` (``LoopedMap.trajectory``).
        looped_map: the loop (as for `jacobiscope.dynamics.drive_map`).

    What "injection" is, per model (also in ``result.injection``):

    - ItrSA model: ``C = embed(puzzle digits) + row/column/box position embeddings``; attention ``MSA(X)``; a
      third part ``"mlp"`` when the model has a per-cell MLP.
    - `jacobiscope.systems.self_attention_map`: its ``injection`` buffer (zero unless ``injection=True``).
    - attention mode of a Hugging Face block: none (the part is zero); the whole drive is the attention.
    - AKOrN: ``c = embed(puzzle digits) + unit embeddings`` (its conditioning); attention is the coupling
      ``J(x)``; the rotation ``Omega x`` is no part of the drive. An AKOrN that normalizes its drive
      (``oscillator_norm=True``) has no additive split and is refused.
    """
    looped_map = as_looped_map(looped_map)
    anatomy = read_anatomy(looped_map, "energy_split")
    if anatomy.parts is None:
        raise ArgumentError(f"energy_split: {anatomy.parts_refusal}.")
    total = pseudo_energy(states, looped_map)
    flat, keep_shape = _per_call_states(states, looped_map)
    parts = {}
    with torch.no_grad():
        for name in anatomy.parts:
            part = drive_map(looped_map, part=name)
            Y = torch.stack([part(state) for state in flat])
            parts[name] = -(flat * Y).reshape(*Y.shape[: 1 + looped_map.batch_dims], -1).sum(-1).reshape(keep_shape)
    return EnergySplit(total=total, parts=parts, injection=anatomy.injection,
                       meta={"map": looped_map.name, "family": anatomy.family})


def _per_call_states(states: torch.Tensor, looped_map: LoopedMap):
    """``states`` as ``[n, *batch, *state]`` (one map call each) and the shape of the energies, ``[*lead, *batch]``."""
    if looped_map.state_shape is not None:
        per_call = looped_map.batch_dims + len(looped_map.state_shape)
    elif looped_map.x0 is not None:
        per_call = looped_map.x0.dim()
    else:
        per_call = states.dim()
    extra = states.dim() - per_call
    flat = states.reshape(-1, *states.shape[extra:])
    return flat, states.shape[: extra + looped_map.batch_dims]
