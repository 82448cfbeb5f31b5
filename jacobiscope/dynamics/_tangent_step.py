"""One loop of an orbit and its tangent frame, ``(x, V) -> (F(x), J V)``, run eagerly, as a traced graph, or compiled.

The frame ``V`` is ``[k, *batch, *state]``. With renormalization the loop also returns the re-orthonormalized
frame, ``log |diag R|`` ``[batch, k]`` and whether each trajectory's new state is finite ``[batch]``: one call does
all the per-loop work of the QR (Benettin) method.

Three ways to run the same function:

- eager: forward-mode AD on dual numbers (k = 1) or ``vmap`` over ``torch.func.jvp`` (k > 1);
- traced: the same function recorded once as a graph of aten operations and replayed (`_tangent_trace`);
- compiled: ``torch.compile`` of the same function (fused kernels; a one-off compilation of 10-20 s on CPU).

Example::

    >>> import torch, jacobiscope
    >>> from jacobiscope.dynamics._tangent_step import eager_tangent_step
    >>> m = jacobiscope.systems.linear_map(torch.diag(torch.tensor([2.0, 0.5], dtype=torch.float64)))
    >>> step = eager_tangent_step(m, batch=1)
    >>> x, frame, log_r, finite = step(torch.ones(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64),
    ...                                renormalize=True)
    >>> x.tolist(), [round(v, 12) for v in log_r[0].exp().tolist()], bool(finite[0])
    ([2.0, 0.5], [2.0, 0.5], True)
"""
from __future__ import annotations

import torch
from torch.autograd import forward_ad

from ..linalg._reverse_products import (needs_reverse_products, reverse_jvp_block, use_reverse_products,
                                        uses_reverse_products)
from ..linalg.operators import _translate_forward_ad_error, forward_ad_context

__all__ = ["TangentStep", "eager_tangent_step", "compiled_tangent_step", "orthonormalize_frame", "loop_functions",
           "jvp_block", "bound_step", "with_params", "map_params"]


def _orthonormalize(Y: torch.Tensor):
    """QR of ``Y [batch, D, k]`` with ``diag R > 0``; returns (Q, log|diag R|). k=1 is a plain normalization.

    A column the Jacobian annihilated exactly (a zero or rank-deficient Jacobian: a constant map, a projection) has
    ``R_ii = 0``: its log is -inf, the exact exponent of that direction, and the frame goes on with a unit vector
    (Householder QR completes the basis by itself; for one vector, the first axis) instead of 0 / 0 = NaN, which
    was read as a diverged orbit.
    """
    if Y.shape[-1] == 1:
        norms = Y.norm(dim=1, keepdim=True)
        collapsed = norms == 0
        axis = torch.zeros_like(Y)
        axis[:, 0] = 1.0
        Q = torch.where(collapsed, axis, Y / torch.where(collapsed, torch.ones_like(norms), norms))
        return Q, norms[:, 0, :].log()
    Q, R = torch.linalg.qr(Y)
    diagonal = R.diagonal(dim1=-2, dim2=-1)
    signs = torch.where(diagonal < 0, -1.0, 1.0).to(Y.dtype)
    return Q * signs.unsqueeze(1), diagonal.abs().log()


def orthonormalize_frame(frame: torch.Tensor, batch: int):
    """``frame [k, *batch, *state]`` -> (orthonormal frame of the same shape, ``log|diag R|`` ``[batch, k]``)."""
    k = frame.shape[0]
    Q, log_r = _orthonormalize(frame.reshape(k, batch, -1).permute(1, 2, 0))
    return Q.permute(2, 0, 1).reshape(frame.shape), log_r


class TangentStep:
    """``step(x, frame, renormalize)``: one loop of the orbit and its frame; ``path`` says how it runs.

    Returns ``(F(x), J frame)``, or with ``renormalize`` ``(F(x), Q, log|diag R|, finite [batch])``.
    """

    def __init__(self, path: str, advance, advance_renormalize):
        self.path = path
        self._advance = advance
        self._advance_renormalize = advance_renormalize

    def __call__(self, x, frame, renormalize: bool):
        return self._advance_renormalize(x, frame) if renormalize else self._advance(x, frame)

    def forget_cached(self) -> bool:
        """Drop graphs this step took from the cache of earlier runs (they may be stale); True if there were."""
        forgotten = False
        for loop in (self._advance, self._advance_renormalize):
            forgotten = bool(getattr(loop, "forget_cached", lambda: False)()) or forgotten
        return forgotten


# ---------------------------------------------------------------------------------------------- the loop itself
def jvp_block(step, x, frame, chunk_size):
    """``(F(x), J frame)`` composably (``torch.func``): what is traced and compiled."""
    from torch.func import jvp, vmap

    if frame.shape[0] == 1:
        output, tangent = jvp(step, (x,), (frame[0],))
        return output, tangent.unsqueeze(0)
    if chunk_size is None or chunk_size >= frame.shape[0]:
        return vmap(lambda v: jvp(step, (x,), (v,)), out_dims=(None, 0))(frame)
    # Chunked vmap cannot concatenate an unbatched (out_dims=None) output: batch it and keep one copy.
    outputs, tangents = vmap(lambda v: jvp(step, (x,), (v,)), chunk_size=chunk_size)(frame)
    return outputs[0], tangents


def _eager_jvp_block(step, x, frame, chunk_size):
    """``(F(x), J frame)`` eagerly: dual numbers for one vector (cheaper than ``torch.func.jvp``), vmap for more."""
    if frame.shape[0] > 1:
        return jvp_block(step, x, frame, chunk_size)
    with forward_ad.dual_level():
        output, tangent = forward_ad.unpack_dual(step(forward_ad.make_dual(x, frame[0])))
    if tangent is None:  # the output does not depend on the state
        tangent = torch.zeros_like(output)
    return output, tangent.unsqueeze(0)


def _reverse_block(step, x, frame, chunk_size):
    """``(F(x), J frame)`` by double backward, for steps forward mode cannot enter (`_reverse_products`)."""
    return reverse_jvp_block(step, x, frame)


def loop_functions(propagate, chunk_size, batch):
    """The two loop functions of a frame, over ``(step, x, frame)``, with ``propagate`` one of the jvp blocks."""

    def advance(step, x, frame):
        return propagate(step, x, frame, chunk_size)

    def advance_renormalize(step, x, frame):
        output, tangents = propagate(step, x, frame, chunk_size)
        frame, log_r = orthonormalize_frame(tangents, batch)
        # x * 0 is 0 exactly where x is finite and NaN where it is not: 3x cheaper than isfinite(x).all(1).
        finite = (output.reshape(batch, -1) * 0).sum(1) == 0
        return output, frame, log_r, finite

    return advance, advance_renormalize


def bound_step(looped_map):
    """``params -> step``: a module map takes its parameters as inputs (never baked into a graph)."""
    if looped_map.module is None:
        return lambda params: looped_map.step
    return lambda params: looped_map.with_params(params).step


def with_params(function, bind):
    """``(params, x, frame) -> function(step with params, x, frame)``: the signature that is traced."""

    def loop(params, x, frame):
        return function(bind(params), x, frame)

    return loop


def map_params(looped_map) -> dict:
    return dict(looped_map.params) if looped_map.module is not None else {}


def eager_tangent_step(looped_map, batch: int, chunk_size=None) -> TangentStep:
    """The eager loop (the reference: what the traced and compiled loops are checked against). A step with a custom
    autograd.Function that forward mode cannot enter switches, once, to products by double backward."""
    advance, renormalize = loop_functions(_eager_jvp_block, chunk_size, batch)
    reverse_advance, reverse_renormalize = loop_functions(_reverse_block, chunk_size, batch)
    step = looped_map.step

    def run(function, reverse_function):
        def call(x, frame):
            with forward_ad_context():
                if uses_reverse_products(looped_map):
                    return reverse_function(step, x, frame)
                try:
                    return function(step, x, frame)
                except (NotImplementedError, RuntimeError) as error:  # name the way out (eval(), eager attention)
                    if not needs_reverse_products(error):
                        raise _translate_forward_ad_error(error, looped_map) from error
                use_reverse_products(looped_map)
                return reverse_function(step, x, frame)

        return call

    return TangentStep("eager", run(advance, reverse_advance), run(renormalize, reverse_renormalize))


# ---------------------------------------------------------------------------------------------- compiled
def compiled_tangent_step(looped_map, batch: int, chunk_size=None) -> TangentStep:
    """The loop through ``torch.compile`` (compiled lazily at its first call; the caller catches failures)."""
    advance, renormalize = loop_functions(jvp_block, chunk_size, batch)
    bind = bound_step(looped_map)
    params = map_params(looped_map)

    def compiled(function):
        compiled_loop = torch.compile(with_params(function, bind), dynamic=False)

        def call(x, frame):
            with forward_ad_context():
                return compiled_loop(params, x, frame)

        return call

    return TangentStep("compiled", compiled(advance), compiled(renormalize))
