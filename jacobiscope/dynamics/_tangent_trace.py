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

import weakref

import torch

from ..linalg._trace import shared_cache, trace_cost_seconds, trace_graph
from ._tangent_step import TangentStep, bound_step, jvp_block, loop_functions, map_params, with_params

__all__ = ["traced_tangent_step", "trace_cost_seconds", "cached_graph", "mark_untraceable", "UNTRACEABLE"]


# Graphs traced in this process, per function owner (held weakly) and call signature; module owners share theirs
# by structure (`jacobiscope.linalg._trace.shared_cache`). A reused graph is checked against the eager loop at the
# start of every run like a new one.
_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
UNTRACEABLE = "untraceable"


class _UntraceableError(RuntimeError):
    """The step could not be traced (raised inside a trial, which drops the traced path). Private: it never leaves
    the trial, whose ``except Exception`` falls back to the eager loop."""


def _signature(looped_map, x, k, chunk_size, renormalize) -> tuple:
    params = tuple((name, tuple(p.shape), p.dtype, p.device) for name, p in map_params(looped_map).items())
    return (type(looped_map), looped_map._power, looped_map.batch_dims, tuple(x.shape), x.dtype, x.device, k,
            chunk_size, renormalize, params)


def _cache_for(owner) -> dict | None:
    return shared_cache(owner, _GRAPHS)


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
        try:
            return trace_graph(with_params(self.function, bound_step(self.map)), self.params, x, frame)
        except Exception as error:  # noqa: BLE001 - whatever stops the trace, the eager loop still works
            raise _UntraceableError(f"'{self.map.name}' could not be traced: {error}") from error


def traced_tangent_step(looped_map, batch: int, chunk_size=None, owner=None) -> TangentStep:
    """The loop as cleaned ``make_fx`` graphs, each traced at its first call; a step that cannot be traced (data-
    dependent control flow, an op without a fake-tensor rule, ...) raises `_UntraceableError` there. ``owner``
    (the module or function the map was built from) keys the graphs reused by later runs in this process."""
    advance, renormalize = loop_functions(jvp_block, chunk_size, batch)
    return TangentStep("traced", _TracedLoop(advance, looped_map, chunk_size, False, owner),
                       _TracedLoop(renormalize, looped_map, chunk_size, True, owner))
