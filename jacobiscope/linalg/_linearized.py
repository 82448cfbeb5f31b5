"""``J v`` at one state from a recorded graph: the forward's work runs once per state, each product only the rest.

Example::

    >>> import torch, jacobiscope
    >>> from jacobiscope.linalg._linearized import ProductPolicy
    >>> m = jacobiscope.systems.self_attention_map(9, 16, seed=0, dtype=torch.float64)
    >>> policy = ProductPolicy(m, m.x0, owner=m.module, linearize=True)
    >>> v = torch.randn(m.x0.shape, dtype=torch.float64)
    >>> bool(torch.allclose(policy.matvec(v), jacobiscope.linalg.jvp(m, m.x0, v))), policy.path
    (True, 'linearized')

Krylov solvers (Lanczos for ``||J||_2``, Arnoldi for eigenvalues) apply the Jacobian at one state tens of times.
An eager jvp reruns the forward with dual numbers each time (~4.7 forwards on a MiniLM layer); here the step's jvp
is recorded once per module structure (`trace_graph`: layers of one model share it), split into the part that does
not depend on the vector (`split_linear`: run once per state) and the part linear in it (~1.2 forwards per product).

When: ``linearize=True`` records at once, ``False`` never, ``None`` (the default) once the eager products of this
owner and call have cost what a recording is expected to cost (`trace_cost_seconds`), or at once when a graph of
the same structure was recorded before. Checked: the first product of every owner on a graph is compared with the
eager jvp, and every new state compares the graph's ``F(x)`` with the step's; a graph that disagrees (a constant
baked in at recording that differs here), cannot be recorded (Python control flow on the state's values, an
operation without a fake-tensor rule) or cannot run is dropped for that owner, and products run eagerly.
"""
from __future__ import annotations

import time
import weakref

import torch
from torch.utils import _pytree

from ._trace import agrees, shared_cache, trace_cost_seconds, trace_graph

__all__ = ["ProductPolicy", "SplitSlot", "split_graph", "graph_leaves", "eager_product_seconds"]

UNTRACEABLE = "untraceable"
_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # function owners; modules share by structure
_CHECKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # owner -> ids of graphs checked for it
_UNOWNED: dict = {}


def _params(looped_map) -> dict:
    return dict(looped_map.params) if looped_map.module is not None else {}


def _signature(looped_map, x) -> tuple:
    params = tuple((name, tuple(p.shape), p.dtype, p.device) for name, p in _params(looped_map).items())
    return ("linearized", type(looped_map), looped_map._power, looped_map.batch_dims, tuple(x.shape), x.dtype,
            x.device, params)


def _weak_entry(table, owner, default):
    if owner is None:
        return default
    try:
        return table.setdefault(owner, type(default)())
    except TypeError:  # not weakly referenceable
        return default


class SplitSlot:
    """Where the split graph of a map's jvp and its eager-time ledger live, for states of ``x``'s signature on this
    owner: resolved once per user (the signature and the owner's structure walk every parameter, too slow to redo
    per product). Modules of one structure share the slot's dicts, as they share the graph."""

    def __init__(self, looped_map, x, owner):
        self.map, self.owner = looped_map, owner
        self.cache = shared_cache(owner, _GRAPHS)
        self.ledger = self.cache if self.cache is not None else _UNOWNED
        self.key = _signature(looped_map, x)
        self.spent_key = ("eager seconds", self.key)

    def spent(self) -> float:
        """Eager jvp time spent since the last recording: what recording would have saved. Krylov products and
        Lyapunov loops of any k add to the same sum, as they would share the recording."""
        return self.ledger.get(self.spent_key, 0.0)

    def spend(self, seconds: float) -> None:
        self.ledger[self.spent_key] = self.spent() + seconds

    def graph(self, x, *, record: bool):
        """The split graph ``(constant, linear)``: recorded before, recorded now at ``x`` when ``record``, else
        None; also None when it cannot be recorded (remembered, so nobody tries again)."""
        from ._reverse_products import uses_reverse_products

        if uses_reverse_products(self.map):  # double-backward products: a recording of forward AD cannot run
            return None
        graph = self.cache.get(self.key) if self.cache is not None else None
        if graph is UNTRACEABLE or (graph is None and not record):
            return None
        if graph is None:
            self.ledger[self.spent_key] = 0.0  # paid for now (or found impossible)
            graph = _record(self.map, x)
            if self.cache is not None:
                self.cache[self.key] = graph if graph is not None else UNTRACEABLE
        return graph

    def forget(self, graph, *, record_again: bool = False) -> None:
        """``graph`` disagreed or failed here: nobody on this structure uses it again; with ``record_again`` (a
        graph from earlier work, which may be stale: the module changed since) the next caller records afresh."""
        if self.cache is not None and graph is not None and self.cache.get(self.key) is graph:
            if record_again:
                del self.cache[self.key]
            else:
                self.cache[self.key] = UNTRACEABLE


def eager_product_seconds(looped_map, x, owner) -> float:
    """`SplitSlot.spent` of this map, state signature and owner."""
    return SplitSlot(looped_map, x, owner).spent()


def split_graph(looped_map, x, owner, *, record: bool):
    """`SplitSlot.graph` of this map, state signature and owner. ``constant(*graph_leaves(map, x))`` runs the
    forward's part once per state; ``linear(*saved, v)`` returns ``(F(x), J v)``."""
    return SplitSlot(looped_map, x, owner).graph(x, record=record)


def graph_leaves(looped_map, x) -> list:
    """The inputs of a split graph's constant part: the map's parameters, then the state."""
    return _pytree.tree_leaves((_params(looped_map), x))


def _record(looped_map, x):
    from ._graph_split import split_linear
    from .operators import jvp_function

    step = looped_map.step if looped_map.module is None else None

    def product(params, state, v):
        bound = step if step is not None else looped_map.with_params(params).step
        return jvp_function(bound, state, v)

    from .._probes import probe_like

    probe = probe_like(x)  # never the state itself
    try:
        return split_linear(trace_graph(product, _params(looped_map), x, probe), vector_inputs=1)
    except Exception:  # noqa: BLE001 - whatever stops the recording, eager products still work
        return None


class ProductPolicy:
    """``matvec(v)`` / ``matmat(V)`` at state ``x``: linearized when that pays (see the module docstring)."""

    def __init__(self, looped_map, x: torch.Tensor, *, owner=None, linearize: bool | None = None):
        self.map, self.x, self.owner, self.mode = looped_map, x, owner, linearize
        self.path = "eager"
        self._graph = self._saved = None
        self._leaves = None
        self._checked_state = False
        self._slot = SplitSlot(looped_map, x, owner)

    # ------------------------------------------------------------------ products
    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        if self._graph is None and self.mode is not False and self._wants_graph():
            checked = self._adopt_graph(v)
            if checked is not None:  # the product the check computed
                return checked
        if self._graph is not None:
            try:
                return self._linear(v)
            except Exception:  # noqa: BLE001 - a graph that cannot run here is dropped; eager goes on
                self._drop()
        return self._eager(v)

    def matmat(self, V: torch.Tensor) -> torch.Tensor:
        if V.shape[0] == 0:
            return torch.empty_like(V)
        return torch.stack([self.matvec(v) for v in V])

    def _eager(self, v):
        from .operators import jvp

        started = time.perf_counter()
        out = jvp(self.map, self.x, v)
        if self.mode is None:
            if self.x.device.type == "cuda":
                torch.cuda.synchronize(self.x.device)
            self._last_eager = time.perf_counter() - started
            self._slot.spend(self._last_eager)
        return out

    def _linear(self, v):
        constant, linear = self._graph
        if self._saved is None:
            self._saved = constant(*self._leaves)
        output, product = linear(*self._saved, v.to(self.x.dtype))
        if not self._checked_state:
            # Once per state: the recorded forward must give this map's F(x) (a stale constant would not).
            with torch.no_grad():
                if not agrees([output], [self.map.step(self.x)], self.x.dtype):
                    raise ValueError("the recorded forward disagrees with the step")
            self._checked_state = True
        return product

    # ------------------------------------------------------------------ choosing and checking the graph
    def _wants_graph(self) -> bool:
        if self.mode is True or self._slot.graph(self.x, record=False) is not None:
            return True
        last = getattr(self, "_last_eager", None)
        return last is not None and self._slot.spent() >= trace_cost_seconds(last)

    def _adopt_graph(self, v):
        """Take the graph (recorded now, or shared); returns ``J v`` when it had to be checked (by the graph, or by
        eager forward AD when the graph failed the check), else None."""
        graph = self._slot.graph(self.x, record=True)
        if graph is None:
            return None
        self._graph, self._leaves = graph, graph_leaves(self.map, self.x)
        checked = _weak_entry(_CHECKED, self.owner, set())
        if id(graph) in checked:
            self.path = "linearized"
            return None
        reference = self._eager(v)
        try:  # the first product of this owner on this graph: against the eager jvp
            product = self._linear(v)
            ok = agrees([product], [reference], self.x.dtype)
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            self._drop()
            return reference
        checked.add(id(graph))
        self.path = "linearized"
        return product  # from here on every product comes from the graph: one path, one rounding

    def _drop(self) -> None:
        self._slot.forget(self._graph)
        self._graph = self._saved = None
        self.path = "eager"
