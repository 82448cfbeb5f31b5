"""Order parameters of tokens on the sphere: second-moment spectrum, participation ratio, clusters, leading axis.

A looped transformer moves ``n`` tokens; normalized to unit vectors they are particles on the sphere
``S^{d-1}``, and attention dynamics typically clusters them. These are the order parameters of that picture
(theory spec, Part A), defined once here so the theory modules and ``analyze`` report the same numbers:

- the second-moment matrix ``M = (1/n) sum_i x_i x_i^T`` of the unit tokens (trace 1, eigenvalues
  ``lambda_1 >= lambda_2 >= ...`` summing to 1). ``lambda_1`` runs from ``1/d`` (isotropic) to ``1`` (every token on
  one axis); in ``d = 2``, ``2 lambda_1 - 1 = |R_2|`` with the Kuramoto–Daido order parameter
  ``R_2 = (1/n) sum_j exp(2 i theta_j)``;
- the participation ratio ``1 / sum lambda_i^2``: the effective number of independent axes (1 for a single
  cluster, ``d`` when isotropic);
- cluster counts from the graph of nearly parallel tokens, sign-blind (axes) and signed (points);
- the leading axis (top eigenvector of ``M``) and how fast it rotates along a trajectory.

``M`` is even in every token, so everything built on it is blind to the sign of a token: antipodal tokens
``+u`` and ``-u`` lie on the same axis. That is the right picture for linear (LSA) attention, where flipping one
token is a symmetry and "clusters" are axes; for softmax (USA) attention clusters are genuine points, which is what
``signed_cluster_count`` and ``polar_order`` measure.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ArgumentError, StateError

__all__ = ["TokenOrderParameters", "token_order_parameters", "leading_axis_rotation"]


@dataclass
class TokenOrderParameters:
    """What `token_order_parameters` returns. Every field has the batch shape ``[*batch]`` of the input (all
    dimensions but the token and feature ones), plus a trailing dimension where noted.

    A batch element with a NaN/Inf token (e.g. a diverged trajectory), or with no non-zero token, has NaN in
    the float fields and -1 in the counts, so one bad element never poisons the others.

    Attributes:
        top_eigenvalue: ``lambda_1`` of ``M = (1/n) sum_i x_i x_i^T`` over the unit tokens, in ``[1/d, 1]``;
            1 means every token lies on one axis.
        eigenvalues: the non-zero part of the spectrum of ``M``, descending, ``[*batch, min(n, d)]``; they sum
            to 1 (``M`` has at most ``min(n, d)`` non-zero eigenvalues, the rest are 0 and omitted).
        participation_ratio: ``1 / sum lambda_i^2`` in ``[1, min(n, d)]``: the effective number of independent
            axes (also available as ``effective_clusters``).
        nematic_order: ``S = (d lambda_1 - 1) / (d - 1)`` in ``[0, 1]``: 0 isotropic, 1 one axis (in ``d = 2`` it
            equals ``2 lambda_1 - 1 = |R_2|``).
        polar_order: ``R_1 = ||(1/n) sum_i x_i||``: the signed (point) order; meaningless for sign-symmetric
            (linear-attention) dynamics, where token signs are frozen.
        cluster_count: number of axes: connected components of the graph linking tokens with
            ``|cos(x_i, x_j)| > cluster_threshold`` (antipodal tokens count as one cluster). ``torch.long``.
        signed_cluster_count: number of point clusters: components of the graph with the signed
            ``cos(x_i, x_j) > cluster_threshold`` (antipodal tokens are two clusters). ``torch.long``.
        leading_axis: the top eigenvector of ``M``, ``[*batch, d]``, unit norm, sign fixed so that its
            largest-magnitude entry (the first, on ties) is positive. Arbitrary when ``lambda_1`` is degenerate
            (compare with ``eigenvalues[..., 1]``).
        tokens: ``n``; dim: ``d``; cluster_threshold: the threshold used.
    """

    top_eigenvalue: torch.Tensor
    eigenvalues: torch.Tensor
    participation_ratio: torch.Tensor
    nematic_order: torch.Tensor
    polar_order: torch.Tensor
    cluster_count: torch.Tensor
    signed_cluster_count: torch.Tensor
    leading_axis: torch.Tensor
    tokens: int
    dim: int
    cluster_threshold: float

    @property
    def effective_clusters(self) -> torch.Tensor:
        """The participation ratio ``1 / sum lambda_i^2``, read as the effective number of clusters (axes)."""
        return self.participation_ratio

    def as_dict(self) -> dict:
        """Plain floats / ints (batch of one) or nested lists, for reports and JSON."""
        out = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = value.tolist() if isinstance(value, torch.Tensor) else value
        out["effective_clusters"] = out["participation_ratio"]
        return out


def token_order_parameters(
    states: torch.Tensor,
    *,
    token_dim: int = -2,
    feature_dim: int = -1,
    cluster_threshold: float = 0.99,
) -> TokenOrderParameters:
    """Order parameters of tokens as points on the sphere: ``lambda_1``, participation ratio, cluster counts, axis.

    Example::

        >>> import torch
        >>> from jacobiscope.dynamics.clusters import token_order_parameters
        >>> x = torch.tensor([[1.0, 0.0], [-2.0, 0.0], [0.0, 3.0]])  # two antipodal tokens on one axis, one on another
        >>> p = token_order_parameters(x)
        >>> round(float(p.top_eigenvalue), 4), round(float(p.participation_ratio), 4)
        (0.6667, 1.8)
        >>> int(p.cluster_count), int(p.signed_cluster_count), p.leading_axis.tolist()
        (2, 3, [1.0, 0.0])

    Signature: ``token_order_parameters(states, *, token_dim=-2, feature_dim=-1, cluster_threshold=0.99)``

    Arguments:
        states: a floating tensor ``[..., tokens, dim]``; every other dimension (time, batch, layer) is a batch
            dimension and gets its own order parameters. Tokens are normalized to unit vectors first, so only
            their directions matter; an all-zero token has no direction and is left out (of ``M``, the counts and
            the polar order).
        token_dim, feature_dim: where the token and feature dimensions are, if not the last two.
        cluster_threshold: cosine above which two tokens are linked for the cluster counts, in ``[0, 1)``;
            the theory spec uses ``1 - eps`` with ``eps ~ 1e-2``.

    Returns:
        `TokenOrderParameters` (tensors with the batch shape; computed in float32 for half-precision input,
        otherwise in the input's dtype, on its device).

    Definitions. ``M = (1/n) sum_i x_i x_i^T`` with unit ``x_i``; its spectrum comes from one batched
    ``torch.linalg.eigh`` of whichever of ``M`` (``d x d``) and the token Gram matrix ``(1/n) X X^T`` (``n x n``) is
    smaller; they share their non-zero eigenvalues, and the leading axis is recovered as ``X^T v / ||X^T v||``.
    Clusters are connected components (single linkage: a chain of linked tokens is one cluster), found by
    batched min-label propagation with pointer jumping; ``cluster_count`` is sign-blind, matching ``M`` and the
    sign symmetry of linear attention, ``signed_cluster_count`` is not (softmax attention).

    References: theory spec Part A (order parameters for d > 2); M. Geshkovski, C. Letrouit, Y. Polyanskiy,
    P. Rigollet, A mathematical perspective on transformers (2023), for clustering of tokens on the sphere.
    """
    x, batch_shape = _tokens_last(states, token_dim, feature_dim, "token_order_parameters")
    if isinstance(cluster_threshold, bool) or not isinstance(cluster_threshold, (int, float)) or not (
        0.0 <= float(cluster_threshold) < 1.0
    ):
        raise ArgumentError(
            f"cluster_threshold must be a cosine in [0, 1), got {cluster_threshold!r}. Two tokens are linked when "
            "their cosine exceeds it; the theory spec uses 1 - 1e-2 = 0.99."
        )
    n, d = x.shape[-2], x.shape[-1]
    unit, present, valid = _unit_tokens(x)
    cosines = unit @ unit.mT  # [*, n, n]; zero tokens give zero rows
    eigenvalues, axis = _second_moment_spectrum(unit, present, cosines)
    top = eigenvalues[..., 0]
    participation = 1.0 / (eigenvalues * eigenvalues).sum(-1)
    nematic = (d * top - 1.0) / (d - 1.0) if d > 1 else torch.ones_like(top)
    count = present.sum(-1).clamp_min(1).to(unit.dtype)
    polar = (unit.sum(-2) / count.unsqueeze(-1)).norm(dim=-1)

    threshold = float(cluster_threshold)
    both = present.unsqueeze(-1) & present.unsqueeze(-2)
    adjacency = torch.stack([(cosines.abs() > threshold) & both, (cosines > threshold) & both])
    components = _count_components(adjacency, present)

    nan = torch.tensor(float("nan"), dtype=unit.dtype, device=unit.device)
    minus_one = torch.tensor(-1, dtype=torch.long, device=unit.device)

    def mask(value, fill):
        shape = valid.shape + (1,) * (value.dim() - valid.dim())
        return torch.where(valid.reshape(shape), value, fill)

    return TokenOrderParameters(
        top_eigenvalue=mask(top, nan).reshape(batch_shape),
        eigenvalues=mask(eigenvalues, nan).reshape(*batch_shape, -1),
        participation_ratio=mask(participation, nan).reshape(batch_shape),
        nematic_order=mask(nematic, nan).reshape(batch_shape),
        polar_order=mask(polar, nan).reshape(batch_shape),
        cluster_count=mask(components[0], minus_one).reshape(batch_shape),
        signed_cluster_count=mask(components[1], minus_one).reshape(batch_shape),
        leading_axis=mask(axis, nan).reshape(*batch_shape, d),
        tokens=n,
        dim=d,
        cluster_threshold=threshold,
    )


def leading_axis_rotation(
    states: torch.Tensor,
    *,
    time_dim: int = 0,
    token_dim: int = -2,
    feature_dim: int = -1,
    signed: bool = False,
    dt: float = 1.0,
) -> torch.Tensor:
    """Angle the leading axis of the tokens turns by between consecutive states of a trajectory.

    Example::

        >>> import torch
        >>> from jacobiscope.dynamics.clusters import leading_axis_rotation
        >>> angles = torch.arange(4, dtype=torch.float64) * 0.1       # a one-axis cluster turning 0.1 rad per loop
        >>> axis = torch.stack([angles.cos(), angles.sin()], -1)       # [T=4, 2]
        >>> states = torch.stack([axis, -3 * axis], dim=1)             # [T, tokens=2, dim=2], antipodal tokens
        >>> [round(v, 12) for v in leading_axis_rotation(states).tolist()]
        [0.1, 0.1, 0.1]

    Signature: ``leading_axis_rotation(states, *, time_dim=0, token_dim=-2, feature_dim=-1, signed=False, dt=1.0)``

    Arguments:
        states: a trajectory ``[T, ..., tokens, dim]`` (``T >= 2``); dimensions other than time, tokens and
            features are batch dimensions.
        time_dim, token_dim, feature_dim: where time, tokens and features are (indices into ``states``).
        signed: ``False`` (default) tracks the top eigenvector of ``M`` (an axis: the angle is sign-blind,
            ``arccos |<a_t, a_{t+1}>|`` in ``[0, pi/2]``); ``True`` tracks the direction of the mean token, for
            dynamics without the sign symmetry (softmax attention), with the signed angle in ``[0, pi]``.
        dt: time between consecutive states; the result is divided by it (an angular speed).

    Returns:
        ``[T-1, *batch]`` angles (radians per ``dt``). NaN where the axis is undefined (a NaN/Inf or all-zero state,
        or a zero mean with ``signed=True``).

    The angle is computed as ``2 atan2(||a - b||, ||a + b||)`` (after flipping ``b`` to the side of ``a`` when
    sign-blind), which equals ``arccos |<a, b>|`` but stays accurate for tiny angles, where ``arccos`` of a number
    next to 1 loses half the digits. The axis of a degenerate top eigenvalue is arbitrary and so is its rotation:
    check the gap ``eigenvalues[..., 0] - eigenvalues[..., 1]`` of `token_order_parameters`. The theory spec asks
    for ``omega dt < pi/4`` between samples, otherwise turns alias.

    References: theory spec Part A (rotation of the principal axis u1(t); Type 1: omega -> 0, Type 2: constant).
    """
    if not isinstance(states, torch.Tensor):
        raise StateError(f"states must be a torch.Tensor [T, ..., tokens, dim], got {type(states).__name__}.")
    if states.dim() < 3:
        raise StateError(
            f"leading_axis_rotation needs a trajectory [T, ..., tokens, dim] (at least 3 dims), got shape "
            f"{tuple(states.shape)}. Stack the states along a time dimension first."
        )
    ndim = states.dim()
    dims = [_normalize_dim(value, ndim, name) for value, name in
            ((time_dim, "time_dim"), (token_dim, "token_dim"), (feature_dim, "feature_dim"))]
    if len(set(dims)) != 3:
        raise ArgumentError(f"time_dim, token_dim and feature_dim must be three different dimensions, got {dims}.")
    if states.shape[dims[0]] < 2:
        raise StateError(f"leading_axis_rotation needs at least 2 states along time_dim, got {states.shape[dims[0]]}.")
    if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not dt > 0:
        raise ArgumentError(f"dt must be a positive number (time between states), got {dt!r}.")
    moved = torch.movedim(states, dims, (0, -2, -1))
    x, batch_shape = _tokens_last(moved, -2, -1, "leading_axis_rotation")
    unit, present, valid = _unit_tokens(x)
    if signed:
        axis = unit.sum(-2)
        norm = axis.norm(dim=-1, keepdim=True)
        valid = valid & (norm[..., 0] > 0)
        axis = axis / torch.where(norm > 0, norm, torch.ones_like(norm))
    else:
        _, axis = _second_moment_spectrum(unit, present, None)
    axis = axis.reshape(*batch_shape, axis.shape[-1])
    valid = valid.reshape(batch_shape)
    a, b = axis[:-1], axis[1:]
    if not signed:
        flip = torch.where((a * b).sum(-1, keepdim=True) < 0, -1.0, 1.0).to(b.dtype)
        b = b * flip
    angle = 2.0 * torch.atan2((a - b).norm(dim=-1), (a + b).norm(dim=-1))
    both = valid[:-1] & valid[1:]
    angle = torch.where(both, angle, torch.full_like(angle, float("nan")))
    return angle / dt


# ---------------------------------------------------------------------------------------------------- helpers
def _normalize_dim(value, ndim: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -ndim <= value < ndim:
        raise ArgumentError(
            f"{name} must be an int in [-{ndim}, {ndim}) for a {ndim}-dim states tensor, got {value!r}."
        )
    return value % ndim


def _tokens_last(states, token_dim, feature_dim, what):
    """Move tokens and features last and flatten the rest: returns ``x [B, n, d]`` and the batch shape."""
    if not isinstance(states, torch.Tensor):
        raise StateError(f"{what} needs a torch.Tensor [..., tokens, dim], got {type(states).__name__}.")
    if states.dim() < 2:
        raise StateError(
            f"{what} needs states [..., tokens, dim] (at least 2 dims), got shape {tuple(states.shape)}. "
            "A single token has no order parameters: add the token dimension."
        )
    if not states.dtype.is_floating_point:
        raise StateError(
            f"{what} needs a floating tensor, got {states.dtype}. Pass states.float() (or .double())."
        )
    ndim = states.dim()
    token_dim = _normalize_dim(token_dim, ndim, "token_dim")
    feature_dim = _normalize_dim(feature_dim, ndim, "feature_dim")
    if token_dim == feature_dim:
        raise ArgumentError(f"token_dim and feature_dim must differ, both are {token_dim}.")
    x = torch.movedim(states, (token_dim, feature_dim), (-2, -1))
    n, d = x.shape[-2], x.shape[-1]
    if n == 0 or d == 0:
        raise StateError(f"{what} needs at least one token and one feature, got tokens={n}, dim={d}.")
    if x.dtype in (torch.float16, torch.bfloat16):
        # eigh has no half-precision kernels; float32 is plenty for order parameters.
        x = x.float()
    batch_shape = x.shape[:-2]
    return x.reshape(-1, n, d), batch_shape


def _unit_tokens(x):
    """Unit tokens ``[B, n, d]`` (NaN/Inf and zero tokens set to 0), which tokens are present, which rows valid."""
    finite = torch.isfinite(x).all(-1)
    x = torch.where(finite.unsqueeze(-1), x, torch.zeros_like(x))
    norm = x.norm(dim=-1, keepdim=True)
    present = norm[..., 0] > 0
    unit = x / torch.where(norm > 0, norm, torch.ones_like(norm))
    valid = finite.all(-1) & present.any(-1)
    return unit, present, valid


def _second_moment_spectrum(unit, present, cosines):
    """Descending eigenvalues of ``M`` (the non-zero ``min(n, d)``, summing to 1) and its sign-fixed top axis."""
    n, d = unit.shape[-2], unit.shape[-1]
    count = present.sum(-1).clamp_min(1).to(unit.dtype).view(-1, 1, 1)
    if n <= d:
        gram = cosines if cosines is not None else unit @ unit.mT
        values, vectors = torch.linalg.eigh(gram / count)
        axis = (unit.mT @ vectors[..., -1:])[..., 0]  # X^T v is the eigenvector of X^T X for the same eigenvalue
    else:
        values, vectors = torch.linalg.eigh(unit.mT @ unit / count)
        axis = vectors[..., -1]
    values = values.flip(-1).clamp_min(0)
    total = values.sum(-1, keepdim=True)
    values = values / torch.where(total > 0, total, torch.ones_like(total))
    norm = axis.norm(dim=-1, keepdim=True)
    axis = axis / torch.where(norm > 0, norm, torch.ones_like(norm))
    # Eigenvectors have no sign; make the largest-magnitude entry positive so runs and devices agree.
    pivot = torch.gather(axis, -1, axis.abs().argmax(-1, keepdim=True))
    axis = axis * torch.where(pivot < 0, -1.0, 1.0).to(axis.dtype)
    return values, axis


def _count_components(adjacency, present):
    """Connected components of boolean graphs ``[..., B, n, n]`` (self-loops implied), counting present nodes only.

    Min-label propagation: every node takes the smallest label among itself and its neighbours, then jumps to
    its label's label. Labels only decrease and always name a node of the same component, so at the fixed point
    each component is labelled by its smallest index and the roots (label == own index) are the components.
    """
    n = adjacency.shape[-1]
    index = torch.arange(n, device=adjacency.device)
    adjacency = adjacency | torch.eye(n, dtype=torch.bool, device=adjacency.device)
    # int32 labels halve the [..., n, n] temporary of each round (gather still wants int64 indices).
    labels = index.to(torch.int32).expand(adjacency.shape[:-1]).contiguous()
    sentinel = torch.tensor(n, dtype=torch.int32, device=adjacency.device)
    for _ in range(n + 1):  # a path needs at most n - 1 propagation rounds; pointer jumping makes it ~log n
        new = torch.where(adjacency, labels.unsqueeze(-2), sentinel).amin(-1)
        new = torch.gather(new, -1, new.long())
        if torch.equal(new, labels):
            break
        labels = new
    roots = (labels == index) & present
    return roots.sum(-1)

