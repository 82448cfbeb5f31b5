"""Parts of a trained loop as maps of their own: its drive (the attention), and the loop with its norm removed.

Example::

    >>> import torch, jacobiscope
    >>> m = jacobiscope.systems.self_attention_map(tokens=4, dim=8, heads=2, eta=0.5)
    >>> attention, bare = jacobiscope.dynamics.drive_map(m), jacobiscope.dynamics.without_norm(m)
    >>> bool(torch.allclose(bare(m.x0), m.x0 + 0.5 * attention(m.x0)))
    True

Both share the loop's weights (``LoopedMap.with_params`` overrides included), batch dims, state shape, ``x0``, dtype
and device, so every diagnostic runs on them unchanged: ``jacobiscope.spectral_norm(drive_map(m), x)`` is the
``||J_MSA(X)||_2`` of Prop. 5.1, and ``jacobiscope.lyapunov_spectrum(without_norm(m), x0)`` shows what the norm does
to the dynamics.
"""
from __future__ import annotations

from ..errors import ArgumentError
from ..maps import LoopedMap, as_looped_map
from ._anatomy import read_anatomy, loop_function

__all__ = ["drive_map", "without_norm", "inner_map"]


def drive_map(looped_map: LoopedMap, *, part: str | None = None) -> LoopedMap:
    """The drive of a loop as its own map, ``X -> Y(X)``; with ``part``, one additive part of it.

    Example::

        >>> import torch, jacobiscope
        >>> m = jacobiscope.systems.self_attention_map(tokens=4, dim=8, heads=2, injection=True)
        >>> Y, attention = jacobiscope.dynamics.drive_map(m), jacobiscope.dynamics.drive_map(m, part="attention")
        >>> bool(torch.allclose(Y(m.x0), attention(m.x0) + m.module.injection))
        True

    Arguments:
        looped_map: a loop of the ItrSA form ``Norm(X + eta * Y(X))`` (the ItrSA model's ``loop_map``,
            `jacobiscope.systems.self_attention_map`, an attention-mode map of `jacobiscope.looped_block`) or
            AKOrN's ``loop_map``.
        part: ``None`` (default): the whole drive ``Y`` the map's pseudo-energy uses — ``MSA(X) + C`` for ItrSA and
            the systems map, the block's attention for an attention-mode map, ``J(x) + c`` for AKOrN.
            ``"attention"``: the attention alone (no injection); ``"injection"``: the constant ``C``; ``"mlp"``:
            an ItrSA model's per-cell MLP when it has one.

    The drive has the Jacobian of the attention sub-map (the injection is constant), so
    ``jacobiscope.spectral_norm(drive_map(m), x)`` is the paper's ``||J_MSA(X)||_2``.
    """
    looped_map = as_looped_map(looped_map)
    anatomy = read_anatomy(looped_map, "drive_map")
    if part is None:
        return loop_function(looped_map, anatomy.drive, f"drive of {looped_map.name}")
    if anatomy.parts is None:
        raise ArgumentError(f"drive_map(part={part!r}): {anatomy.parts_refusal} — pass part=None for the whole "
                            "drive.")
    if part not in anatomy.parts:
        raise ArgumentError(f"drive_map: the drive of '{looped_map.name}' has the parts {sorted(anatomy.parts)}, got "
                            f"part={part!r} — pass one of them, or part=None for the whole drive.")
    return loop_function(looped_map, anatomy.parts[part], f"{part} of {looped_map.name}")


def without_norm(looped_map: LoopedMap) -> LoopedMap:
    """The loop with its normalization replaced by the identity: ``X -> X + eta * Y(X)``, the same weights.

    Example::

        >>> import torch, jacobiscope
        >>> m = jacobiscope.systems.self_attention_map(tokens=4, dim=8, heads=2, eta=0.5)
        >>> bare = jacobiscope.dynamics.without_norm(m)
        >>> bool(torch.allclose(m.module.normalize(bare(m.x0)), m(m.x0)))   # the norm is all that was taken out
        True

    For AKOrN the normalization is the projection back onto the oscillators' unit spheres, so the map is
    ``x -> x + gamma * (Omega x + y - <y, x> x)``. The map keeps the loop's drive (`jacobiscope.pseudo_energy`
    works on it). Run without the norm a trained loop usually grows without bound: `LoopedMap.trajectory`
    stops at the first NaN/Inf state with a warning.
    """
    looped_map = as_looped_map(looped_map)
    anatomy = read_anatomy(looped_map, "without_norm")
    bare = loop_function(looped_map, anatomy.pre_norm, f"{looped_map.name} without norm", keep_drive=True)
    bare.info.norm = "removed"
    return bare


def inner_map(looped_map: LoopedMap) -> LoopedMap:
    """The map inside the residual: ``Y`` of ``Norm(X + eta * Y(X))``, AKOrN's ``G(x) = Omega x + y - <y, x> x``.

    Example::

        >>> import jacobiscope
        >>> m = jacobiscope.systems.self_attention_map(tokens=4, dim=8, heads=2)
        >>> jacobiscope.dynamics._submaps.inner_map(m).name
        'inner map of self_attention(tokens=4, dim=8, heads=2, eta=1.0, norm=rmsnorm)'

    It is the sub-map whose Jacobian norm enters `jacobiscope.dynamics.norm_bound` (for the ItrSA form it is the drive).
    """
    looped_map = as_looped_map(looped_map)
    anatomy = read_anatomy(looped_map, "inner_map")
    return loop_function(looped_map, anatomy.inner, f"inner map of {looped_map.name}")
