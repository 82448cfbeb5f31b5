"""The loop of a Lyapunov run recorded once as a graph of aten operations and replayed: no forward-AD bookkeeping.

Example::

    >>> import torch, jacobiscope
    >>> from jacobiscope.dynamics._tangent_trace import traced_tangent_step
    >>> m = jacobiscope.systems.henon_map()
    >>> step = traced_tangent_step(m, batch=1)
    >>> x, tangent = step(m.x0, torch.tensor([[1.0, 0.0]], dtype=torch.float64), renormalize=False)
    >>> [round(v, 12) for v in tangent[0].tolist()]      # J e_1 at (0.1, 0.1): (-2 a x, b)
    [-0.28, 0.3]
    >>> step.path
    'traced'

Eager forward-mode AD spends most of its time outside the arithmetic: a product with a Python number or a weight
has a zero tangent whose shape is worked out in Python (~300 us each on CPU). ``make_fx`` records the loop function
once with fake tensors (so a step with data-dependent Python control flow refuses to be traced instead of being
frozen on one branch), `simplify_tangent_graph` strips the work on zero tangents, and each loop replays the plain
aten operations that remain. The map's parameters are inputs of the graph, never baked in.
"""
from __future__ import annotations

import collections
import warnings
import weakref

import torch

from ..linalg.operators import forward_ad_context
from ._tangent_step import TangentStep, bound_step, jvp_block, loop_functions, map_params, with_params

__all__ = ["traced_tangent_step", "trace_cost_seconds", "cached_graph", "mark_untraceable", "UNTRACEABLE"]


# Graphs traced in this process, per function owner (held weakly) and call signature; module owners share theirs by
# structure (`_SHARED` below). A reused graph is checked against the eager loop at the start of every run like a new
# one.
_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
UNTRACEABLE = "untraceable"
# Measured on a 2-core Xeon (81 x 128 attention map): 0.5-0.6 s a trace, 1.2 s for the first one in a process.
_TRACE_SECONDS = 0.6
_FIRST_TRACE_EXTRA_SECONDS = 0.8
_traced_once = False


class _UntraceableError(RuntimeError):
    """The step could not be traced (raised inside a trial, which drops the traced path). Private: it never leaves
    the trial, whose ``except Exception`` falls back to the eager loop."""


_TRACE_PER_EAGER_LOOP = 100  # a trace costs ~60-80 eager loops of a dispatch-bound map (fewer of a heavy one)


def trace_cost_seconds(eager_loop_seconds: float = 0.0) -> float:
    """The expected cost of tracing one loop function in this process, given the time of one eager loop.

    Tracing costs per operation what an eager loop costs per operation times a constant, so a map with more
    operations costs more to trace; the floor covers small maps, the extra the first trace of a process.
    """
    per_map = max(_TRACE_SECONDS, _TRACE_PER_EAGER_LOOP * eager_loop_seconds)
    return per_map + (0.0 if _traced_once else _FIRST_TRACE_EXTRA_SECONDS)


def _signature(looped_map, x, k, chunk_size, renormalize) -> tuple:
    params = tuple((name, tuple(p.shape), p.dtype, p.device) for name, p in map_params(looped_map).items())
    return (type(looped_map), looped_map._power, looped_map.batch_dims, tuple(x.shape), x.dtype, x.device, k,
            chunk_size, renormalize, params)


# Graphs shared by modules of one structure (the same classes, layout and parameter shapes: the layers of one model,
# the same block on inputs of one shape). Parameters are graph inputs, so another layer's weights are its own; what a
# graph may have baked in (a captured mask, a Python scalar) is caught by the check every reused graph gets at its
# first loop, which then traces afresh. Bounded: the oldest structure is forgotten first.
_SHARED: "collections.OrderedDict[tuple, dict]" = collections.OrderedDict()
_SHARED_STRUCTURES = 64


def _structure(owner) -> tuple | None:
    """What identical modules share (None for a function owner: its closure may hold anything)."""
    if not isinstance(owner, torch.nn.Module):
        return None
    shapes = tuple((name, tuple(t.shape), t.dtype) for name, t in (*owner.named_parameters(), *owner.named_buffers()))
    return (type(owner), repr(owner), shapes)


def _cache_for(owner) -> dict | None:
    if owner is None:
        return None
    structure = _structure(owner)
    if structure is not None:
        cache = _SHARED.pop(structure, None)
        _SHARED[structure] = cache if cache is not None else {}
        while len(_SHARED) > _SHARED_STRUCTURES:
            _SHARED.popitem(last=False)
        return _SHARED[structure]
    try:
        return _GRAPHS.setdefault(owner, {})
    except TypeError:  # not weakly referenceable (a builtin): no cache
        return None


def cached_graph(owner, looped_map, x, k, chunk_size, renormalize=True):
    """The graph traced before for this map and call, ``"untraceable"`` when it refused, or None."""
    return (_cache_for(owner) or {}).get(_signature(looped_map, x, k, chunk_size, renormalize))


def mark_untraceable(owner, looped_map, x, k, chunk_size) -> None:
    cache = _cache_for(owner)
    if cache is not None:
        for flag in (False, True):
            cache[_signature(looped_map, x, k, chunk_size, flag)] = UNTRACEABLE


class _TracedLoop:
    """One loop function, traced at its first call (or taken from the cache) and replayed after that."""

    def __init__(self, function, looped_map, chunk_size, renormalize, owner):
        self.function = function
        self.map = looped_map
        self.chunk_size = chunk_size
        self.renormalize = renormalize
        self.cache = _cache_for(owner)
        self.params = map_params(looped_map)
        self.graph = None

    def __call__(self, x, frame):
        if self.graph is None:
            self.graph = self._graph(x, frame)
        return self.graph(self.params, x, frame)

    def _graph(self, x, frame):
        self.key = _signature(self.map, x, frame.shape[0], self.chunk_size, self.renormalize)
        graph = self.cache.get(self.key) if self.cache is not None else None
        if graph is UNTRACEABLE:
            raise _UntraceableError(f"'{self.map.name}' could not be traced before")
        self.from_cache = graph is not None
        if graph is None:
            graph = self._trace(x, frame)
            if self.cache is not None:
                self.cache[self.key] = graph
        return graph

    def forget_cached(self) -> bool:
        if not getattr(self, "from_cache", False):
            return False
        self.cache.pop(self.key, None)
        self.graph, self.from_cache = None, False
        return True

    def _trace(self, x, frame):
        global _traced_once
        with warnings.catch_warnings():  # a first import of torch._dynamo warns about torch.jit deprecations
            warnings.simplefilter("ignore", DeprecationWarning)
            from torch.fx.experimental.proxy_tensor import make_fx

            from ._graph_cleanup import simplify_tangent_graph

            _traced_once = True
            try:
                with torch.no_grad(), forward_ad_context():
                    graph = make_fx(with_params(self.function, bound_step(self.map)), tracing_mode="fake",
                                    _allow_non_fake_inputs=True)(self.params, x, frame)
                return simplify_tangent_graph(graph)
            except Exception as error:  # noqa: BLE001 - whatever stops the trace, the eager loop still works
                raise _UntraceableError(f"'{self.map.name}' could not be traced: {error}") from error


def traced_tangent_step(looped_map, batch: int, chunk_size=None, owner=None) -> TangentStep:
    """The loop as cleaned ``make_fx`` graphs, each traced at its first call; a step that cannot be traced (data-
    dependent control flow, an op without a fake-tensor rule, ...) raises `_UntraceableError` there. ``owner``
    (the module or function the map was built from) keys the graphs reused by later runs in this process."""
    advance, renormalize = loop_functions(jvp_block, chunk_size, batch)
    return TangentStep("traced", _TracedLoop(advance, looped_map, chunk_size, False, owner),
                       _TracedLoop(renormalize, looped_map, chunk_size, True, owner))
