"""Record a product function of a looped map once as a graph of aten operations (``make_fx`` with fake tensors).

Example::

    >>> import torch
    >>> from jacobiscope.linalg._trace import trace_graph
    >>> W = torch.randn(4, 4)
    >>> def f(x, v):
    ...     return torch.func.jvp(lambda z: torch.nn.functional.layer_norm(z @ W, (4,)), (x,), (v,))[1] @ W
    >>> graph = trace_graph(f, torch.ones(2, 4), torch.ones(2, 4))
    >>> x, v = torch.randn(2, 4), torch.randn(2, 4)
    >>> bool(torch.allclose(graph(x, v), f(x, v), atol=1e-5))
    True

Fake tensors keep the values out of the recording, so a step with Python control flow on the state's values refuses
to be traced instead of being frozen on one branch. Two things stand in the way of recording the forward-mode
derivatives of real models, and are handled here:

- torch's fused normalizations (``layer_norm``, ``group_norm``, ``rms_norm``) give a tangent on the ``meta`` device
  under fake tensors (torch 2.13), so every LayerNorm model (BERT, GPT-2, ViT, ...) failed to trace and ran eagerly.
  While recording they are replaced by their textbook formulas (mean, variance, rsqrt), whose derivatives trace;
  the replay agrees with the fused kernel to rounding (the callers check the first product against the eager one).
- the weights' zero tangents and copies to ``meta`` that eager forward AD records are stripped
  (`simplify_tangent_graph`).
"""
from __future__ import annotations

import collections
import contextlib
import warnings

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["trace_graph", "traceable_norms", "shared_cache", "trace_cost_seconds", "agrees"]

# Measured on a 2-core Xeon (one thread, 2026-12-03, torch warmed up): a recording costs 0.14-0.37 s, whatever the
# arithmetic: the 81 x 128 attention map's loop 0.15-0.18 s (76 of its eager k = 1 loops, 11 of its k = 16 loops),
# HRM-Text's 0.34-0.39 s (100-140 eager jvps), Dory's 0.35-0.64 s, a MiniLM layer's jvp 0.4-0.5 s (its eager loop
# takes 30-60 ms: the cost follows the number of operations, so the multiple of an eager loop is capped). The first
# recording in a process costs ~0.5 s more (bench_analyze_cost.py: a first top-1 call on the 81 x 128 map went from
# 7.0x eager to 8.0x when it recorded with a 0.15 s allowance for it).
_TRACE_SECONDS = 0.2
_MAX_TRACE_SECONDS = 0.8
_TRACE_PER_EAGER_LOOP = 40  # ~80-120 eager k = 1 loops of a dispatch-bound map; fewer of a heavy one or a large k
_FIRST_TRACE_EXTRA_SECONDS = 0.6
_traced_once = False


def trace_cost_seconds(eager_loop_seconds: float = 0.0) -> float:
    """The expected cost of tracing one loop function in this process, given the time of one eager loop.

    Tracing costs per operation what an eager loop of a dispatch-bound map costs per operation times a constant;
    the floor covers small maps, the cap heavy ones (whose eager loop is arithmetic, which a trace does not run),
    the extra the first trace of a process.
    """
    per_map = min(max(_TRACE_SECONDS, _TRACE_PER_EAGER_LOOP * eager_loop_seconds), _MAX_TRACE_SECONDS)
    return per_map + (0.0 if _traced_once else _FIRST_TRACE_EXTRA_SECONDS)


def agrees(candidate, reference, dtype) -> bool:
    """Whether the outputs of a recorded or compiled function match the eager one's (same inputs) to rounding."""
    tolerance = 1e3 * torch.finfo(dtype).eps
    for got, expected in zip(candidate, reference):
        got, expected = got.detach(), expected.detach()
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return False
        if got.dtype == torch.bool:
            if not bool((got == expected).all()):
                return False
            continue
        scale = 1.0 + float(torch.nan_to_num(expected.abs(), nan=0.0, posinf=0.0).max()) if expected.numel() else 1.0
        same = (got == expected) | (torch.isnan(got) & torch.isnan(expected))  # Inf == Inf, NaN where NaN
        difference = torch.where(same, torch.zeros_like(got), (got - expected).abs())
        if not bool((torch.nan_to_num(difference, nan=float("inf")) <= tolerance * scale).all()):
            return False
    return True


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = tuple(range(-len(tuple(normalized_shape)), 0))
    centered = x - x.mean(dim=dims, keepdim=True)
    out = centered * torch.rsqrt((centered * centered).mean(dim=dims, keepdim=True) + eps)
    return _affine(out, weight, bias)


def _rms_norm(x, normalized_shape, weight=None, eps=None):
    dims = tuple(range(-len(tuple(normalized_shape)), 0))
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    return _affine(x * torch.rsqrt((x * x).mean(dim=dims, keepdim=True) + eps), weight, None)


def _group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    grouped = x.reshape(x.shape[0], num_groups, -1)
    centered = grouped - grouped.mean(dim=-1, keepdim=True)
    out = (centered * torch.rsqrt((centered * centered).mean(dim=-1, keepdim=True) + eps)).reshape(x.shape)
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 2)  # per channel (dim 1)
    weight = None if weight is None else weight.reshape(shape)
    return _affine(out, weight, None if bias is None else bias.reshape(shape))


def _affine(out, weight, bias):
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


_DECOMPOSED = {torch.nn.functional.layer_norm: _layer_norm, torch.layer_norm: _layer_norm,
               torch.nn.functional.group_norm: _group_norm, torch.group_norm: _group_norm}
if hasattr(torch.nn.functional, "rms_norm"):  # torch >= 2.4
    _DECOMPOSED.update({torch.nn.functional.rms_norm: _rms_norm, torch.rms_norm: _rms_norm})


class _TraceableNorms(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        replacement = _DECOMPOSED.get(func)
        return (replacement or func)(*args, **(kwargs or {}))


def traceable_norms():
    """A context in which the fused normalizations run as their formulas (see the module docstring)."""
    return _TraceableNorms()


def trace_graph(function, *args):
    """``function(*args)`` recorded with fake tensors and cleaned of zero-tangent work; raises what stops it."""
    global _traced_once
    _traced_once = True
    with warnings.catch_warnings():  # a first import of torch._dynamo warns about torch.jit deprecations
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.fx.experimental.proxy_tensor import make_fx

        from ._graph_cleanup import simplify_tangent_graph

        def recorded(*inner):
            with traceable_norms():
                return function(*inner)

        from .operators import forward_ad_context

        with torch.no_grad(), forward_ad_context():
            graph = make_fx(recorded, tracing_mode="fake", _allow_non_fake_inputs=True)(*args)
        return simplify_tangent_graph(graph)


# Graphs shared by modules of one structure (the same classes, layout and parameter shapes: the layers of one model,
# the same block on inputs of one shape). Parameters are graph inputs, so another layer's weights are its own; what a
# graph may have baked in (a captured mask, a Python scalar) is caught by the check a reused graph gets before use.
# Bounded: the oldest structure is forgotten first.
_SHARED: "collections.OrderedDict[tuple, dict]" = collections.OrderedDict()
_SHARED_STRUCTURES = 64


def _structure(owner) -> tuple | None:
    """What identical modules share (None for a function owner: its closure may hold anything)."""
    if not isinstance(owner, torch.nn.Module):
        return None
    shapes = tuple((name, tuple(t.shape), t.dtype) for name, t in (*owner.named_parameters(), *owner.named_buffers()))
    return (type(owner), repr(owner), shapes)


def shared_cache(owner, per_owner) -> dict | None:
    """The graph cache of ``owner``: shared by structure for a module, else ``per_owner[owner]`` (a weak mapping);
    None when the owner cannot be a key."""
    if owner is None:
        return None
    structure = _structure(owner)
    if structure is not None:
        cache = _SHARED.pop(structure, None)
        _SHARED[structure] = cache if cache is not None else {}
        while len(_SHARED) > _SHARED_STRUCTURES:
            _SHARED.popitem(last=False)
        return _SHARED[structure]
    with contextlib.suppress(TypeError):  # not weakly referenceable (a builtin): no cache
        return per_owner.setdefault(owner, {})
    return None
