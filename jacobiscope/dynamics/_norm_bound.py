"""The Jacobian bound of a normalized loop (Tomihari & Karakida, NeurIPS 2025, Prop. 5.1) at a state."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..linalg.svd import spectral_norm
from ..maps import LoopedMap, as_looped_map, require_precision
from .._validation import seed_int, tolerance, within_budget
from ._anatomy import call_on_loop, matching_norm, per_trajectory_min, read_anatomy
from ._submaps import inner_map

__all__ = ["NormBound", "norm_bound"]


@dataclass
class NormBound:
    """What `norm_bound` returns; every tensor has the map's batch shape (0-d for one trajectory).

    Attributes:
        bound: ``(max_gamma / R) * (1 + |eta| * inner_norm)``, an upper bound of ``||J||_2``.
        measured: ``||J||_2`` of the loop at the state (`jacobiscope.spectral_norm`).
        ratio: ``bound / measured`` (>= 1; how loose the bound is).
        R: the norm's scale, the smallest denominator the norm divides a token (AKOrN: an oscillator) by.
        max_gamma: ``max_j |gamma_j|`` of the norm's gain (1 without a gain, and for AKOrN).
        inner_norm: ``||J_MSA(X)||_2``, the Jacobian norm of the map inside the residual (`drive_map` for the
            ItrSA form; AKOrN's ``G(x) = Omega x + y - <y, x> x``).
        eta: ``|eta|`` (AKOrN: ``|gamma|``, its learned step).
        norm_kind: ``"rmsnorm"``, ``"layernorm"``, ``"sphere"`` (AKOrN) or ``"none"``.
        form: ``"normalized-attention"`` or ``"oscillator"``.
        converged: whether both spectral norms reached their tolerance.
    """

    bound: torch.Tensor
    measured: torch.Tensor
    ratio: torch.Tensor
    R: torch.Tensor
    max_gamma: torch.Tensor
    inner_norm: torch.Tensor
    eta: torch.Tensor
    norm_kind: str
    form: str
    converged: bool
    meta: dict = field(default_factory=dict)


def norm_bound(looped_map: LoopedMap, x: torch.Tensor | None = None, *, tol: float | None = None,
               max_iter: int = 200, seed: int = 0) -> NormBound:
    """The Prop. 5.1 bound ``||dF/dX||_2 <= (max_j |gamma_j| / R) (1 + eta ||J_MSA(X)||_2)`` at ``x``, with the
    measured norm it bounds.

    Example::

        >>> import torch, jacobiscope
        >>> m = jacobiscope.systems.self_attention_map(tokens=6, dim=8, heads=2, dtype=torch.float64)
        >>> result = jacobiscope.dynamics.norm_bound(m, m.x0)
        >>> bool(result.bound >= result.measured), result.norm_kind
        (True, 'rmsnorm')

    Arguments:
        looped_map: a loop ``F(X) = Norm(X + eta * Y(X))``: the ItrSA model's ``loop_map``,
            `jacobiscope.systems.self_attention_map`, or an attention-mode map of `jacobiscope.looped_block` (its
            norm an RMSNorm or LayerNorm with an elementwise gain). AKOrN's ``loop_map`` gets the same bound for
            its update ``normalize(x + gamma * G(x))``. Block-mode maps are refused with the fix.
        x: the state (default: the map's ``x0``).
        tol, max_iter, seed: passed to both `jacobiscope.spectral_norm` runs.

    Which R: the per-token scale the norm divides by, ``r_i = sqrt(mean_j z_ij^2 + eps)`` of the pre-norm state
    ``Z = X + eta * Y(X)`` (LayerNorm: of the centred ``z_i``, i.e. the standard deviation; AKOrN: ``||z_g||_2`` of
    each oscillator), minimized over the tokens of each trajectory. Why: the norm acts token by token, so its
    Jacobian is block diagonal with blocks ``diag(gamma) (I - z z^T / (d r^2)) / r`` (LayerNorm: times the
    centring projection), each of norm at most ``max|gamma| / r_i`` because ``d r_i^2 >= ||z_i||^2``; the
    largest block, at the smallest ``r_i``, bounds them all, and ``||I + eta J_MSA||_2 <= 1 + |eta| ||J_MSA||_2``.
    ``eps`` is kept inside ``r`` because it is what the norm divides by (the plain RMS, ``eps = 0``, gives a
    slightly larger bound that also holds). With the minimum over tokens the bound holds for every token, not only
    for a typical one.

    Returns:
        `NormBound`. The two norms are Lanczos estimates (from below, to ``tol``); the check that the norm was read
        right is exact: the norm applied to ``X + eta * Y(X)`` must reproduce the step, or `ArgumentError` says
        which norm it found.
    """
    tol = tolerance(tol, "tol")
    max_iter = within_budget(max_iter, "max_iter", "iterations", unit="iterations")
    seed = seed_int(seed)
    looped_map = as_looped_map(looped_map).detached()
    anatomy = read_anatomy(looped_map, "norm_bound")
    x = looped_map.prepare_state(x)
    require_precision(x, "norm_bound")
    with torch.no_grad():
        z = call_on_loop(looped_map, anatomy.pre_norm, x)
        norm = matching_norm(looped_map, anatomy, x, z, looped_map.step(x), "norm_bound")
        R = per_trajectory_min(norm.scale(z), looped_map.batch_dims)
        max_gamma = norm.max_gain(x)
        eta = _as_real(call_on_loop(looped_map, lambda loop, _: anatomy.eta(loop), x), x).abs()
    options = {"tol": tol, "max_iter": max_iter, "seed": seed}
    inner = spectral_norm(inner_map(looped_map), x, **options)
    measured = spectral_norm(looped_map, x, **options)
    bound = max_gamma / R * (1 + eta * inner.value)
    return NormBound(
        bound=bound, measured=measured.value, ratio=bound / measured.value, R=R,
        max_gamma=max_gamma.expand_as(R).clone(), inner_norm=inner.value, eta=eta.expand_as(R).clone(),
        norm_kind=norm.kind, form=anatomy.form, converged=inner.converged and measured.converged,
        meta={"map": looped_map.name, "family": anatomy.family, "dtype": str(x.dtype), "device": str(x.device),
              "iterations": (inner.iterations, measured.iterations)},
    )


def _as_real(value, like: torch.Tensor) -> torch.Tensor:
    """A step size (a Python number or a parameter) as a tensor of ``like``'s dtype, without a detour through float32
    (``torch.as_tensor(0.8)`` would round it to 0.800000011920929)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(dtype=like.dtype, device=like.device)
    return torch.tensor(float(value), dtype=like.dtype, device=like.device)
