"""Which way to run the loops of a Lyapunov run: eager, a traced graph, or ``torch.compile`` — chosen by cost.

Example::

    >>> import torch, jacobiscope
    >>> from jacobiscope.dynamics._tangent_policy import LoopRunner
    >>> m = jacobiscope.systems.henon_map()
    >>> runner = LoopRunner(m, m, batch=1, chunk_size=None, compile=False, total_loops=3)
    >>> x, frame = m.x0, torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    >>> x, frame, log_r, finite = runner(x, frame, renormalize=True)
    >>> runner.path, bool(finite)
    ('eager', True)

``compile=None`` (the default of `lyapunov_spectrum`) decides by itself, like renting skis before buying them:

1. The first two loops run eagerly and are timed. When the eager time this run still has to go, plus the eager
   time earlier runs spent on the same map and call (its owner, k, state shape: the graph a trace would make),
   exceeds the expected cost of a trace (`trace_cost_seconds`), the loop is traced (`traced_tangent_step`). A short
   run on a new map stays eager, so it is never slowed down; repeated short runs on one map trace once they have
   spent what the trace costs, whatever other maps or other k ran in between (the accounting is per map, not per
   process).
   A map traced before in this process reuses its graph at once (and traces afresh, once, if that graph no
   longer agrees: the module changed since).
2. A traced loop is timed over 16 loops; when the rest of the run would still take more than
   ``_COMPILE_PAYOFF_SECONDS`` it is compiled with ``torch.compile`` (a 10-20 s compilation on CPU pays off only
   on such runs).

Every switch is checked: the first loop of a new path runs on both paths from the same inputs, the eager result is
kept, and the new path is used only if it agrees to rounding. A path that fails to build, raises, or disagrees is
dropped silently and the run goes on as it was. ``compile=False`` always runs eagerly; ``compile=True`` compiles
from the first loop (falling back to eager with a warning when compilation fails).
"""
from __future__ import annotations

import time
import warnings
import weakref

import torch

from ..linalg._reverse_products import uses_reverse_products
from ..linalg._trace import agrees, shared_cache
from ._tangent_step import compiled_tangent_step, eager_tangent_step
from ._tangent_trace import UNTRACEABLE, cached_graph, mark_untraceable, trace_cost_seconds, traced_tangent_step

__all__ = ["LoopRunner"]

_TIMED_EAGER_LOOPS = 2
_TIMED_TRACED_LOOPS = 16
_COMPILE_PAYOFF_SECONDS = 120.0  # a 10-20 s compilation (CPU), recouped when compiled loops are >= 1.2x faster
_MIN_LOOPS_FOR_CACHED_GRAPH = 4  # a cached graph still costs one checking loop
# Eager loop time automatic runs spent, per map owner and call (k, state shape, dtype, device), since that call's
# last trace: what a trace of that graph would have saved. Kept where the graphs are (`shared_cache`): modules of one
# structure (the layers of a model) share it as they share the graph. Function owners are held weakly; maps without
# an owner share `_UNOWNED`.
_EAGER_SPENT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_UNOWNED: dict = {}


def _spent_for(owner) -> dict:
    ledger = shared_cache(owner, _EAGER_SPENT)
    return _UNOWNED if ledger is None else ledger


def eager_seconds_spent(owner, key) -> float:
    """Eager time automatic runs spent on this owner's call ``key`` (k, state shape, dtype, device) since its last
    trace (what tracing would save); modules of one structure share it."""
    return _spent_for(owner).get(("eager seconds", *key), 0.0)


class LoopRunner:
    """``runner(x, frame, renormalize)``: one loop on the current path (``path``: eager, traced or compiled)."""

    def __init__(self, looped_map, owner, *, batch: int, chunk_size, compile, total_loops: int):
        self.map = looped_map
        self.owner = owner
        self.batch = batch
        self.chunk_size = chunk_size
        self.mode = compile
        self.total = total_loops
        self.loop = 0
        self.eager = eager_tangent_step(looped_map, batch, chunk_size)
        self.fast = None  # a traced or compiled TangentStep on trial or in use
        self.checked: set[bool] = set()  # the variants (renormalize or not) of `fast` that agreed with eager
        self.path = "eager"
        self.paths_tried: list[str] = []
        self._candidate_path = "eager"
        self._eager_timings: list[float] = []
        self._traced_started: float | None = None
        self._traced_loops = 0
        self._account = None  # (owner's ledger, call key), set at the first loop

    def _spend(self, seconds: float) -> None:
        ledger, key = self._account
        ledger[key] = ledger.get(key, 0.0) + seconds

    def __call__(self, x: torch.Tensor, frame: torch.Tensor, renormalize: bool):
        self.loop += 1
        if self.loop == 1:
            self._account = (_spent_for(self.owner),
                             ("eager seconds", frame.shape[0], tuple(x.shape), x.dtype, str(x.device)))
            self._choose_first_path(x, frame)
        if self.fast is not None:
            if renormalize in self.checked:
                out = self.fast(x, frame, renormalize)
                self._after_fast_loop(x)
                return out
            return self._trial(x, frame, renormalize)
        if self.mode is not None:
            return self.eager(x, frame, renormalize)
        if len(self._eager_timings) >= _TIMED_EAGER_LOOPS:  # decided already: count the time, no device sync
            self._spend(min(self._eager_timings))
            return self.eager(x, frame, renormalize)
        started = time.perf_counter()
        out = self.eager(x, frame, renormalize)
        self._after_timed_eager_loop(x, frame, started)
        return out

    # ------------------------------------------------------------------ decisions
    def _choose_first_path(self, x, frame) -> None:
        if self.mode is True:
            self._try(compiled_tangent_step(self.map, self.batch, self.chunk_size), "compiled")
        elif self.mode is None and self.total >= _MIN_LOOPS_FOR_CACHED_GRAPH:
            graph = cached_graph(self.owner, self.map, x, frame.shape[0], self.chunk_size)
            if graph is not None and graph is not UNTRACEABLE:
                self._try_trace(x, frame)

    def _after_timed_eager_loop(self, x, frame, started: float) -> None:
        _synchronize(x)
        seconds = time.perf_counter() - started
        self._spend(seconds)
        self._eager_timings.append(seconds)
        if len(self._eager_timings) != _TIMED_EAGER_LOOPS or "traced" in self.paths_tried:
            return
        per_loop = min(self._eager_timings)
        remaining = (self.total - self.loop) * per_loop
        ledger, key = self._account
        if remaining > 0 and ledger.get(key, 0.0) + remaining >= trace_cost_seconds(per_loop):
            if cached_graph(self.owner, self.map, x, frame.shape[0], self.chunk_size) is not UNTRACEABLE:
                self._try_trace(x, frame)

    def _after_fast_loop(self, x) -> None:
        if self.path != "traced" or self.mode is not None:
            return
        self._traced_loops += 1
        if self._traced_loops == 1:
            _synchronize(x)
            self._traced_started = time.perf_counter()
        elif self._traced_loops == 1 + _TIMED_TRACED_LOOPS:
            _synchronize(x)
            per_loop = (time.perf_counter() - self._traced_started) / _TIMED_TRACED_LOOPS
            if (self.total - self.loop) * per_loop >= _COMPILE_PAYOFF_SECONDS:
                self._try(compiled_tangent_step(self.map, self.batch, self.chunk_size), "compiled")

    def _try_trace(self, x, frame) -> None:
        if self._account is not None:  # this call's trace is paid for (or found impossible) at the next loop
            ledger, key = self._account
            ledger[key] = 0.0
        self._try(traced_tangent_step(self.map, self.batch, self.chunk_size, owner=self.owner), "traced")

    def _try(self, step, path: str) -> None:
        if uses_reverse_products(self.map):  # double-backward products: torch.func (trace, compile) cannot run them
            return
        if path not in self.paths_tried:
            self.paths_tried.append(path)
        self.fast, self.checked, self._candidate_path = step, set(), path

    # ------------------------------------------------------------------ checking a new path
    def _trial(self, x, frame, renormalize):
        """Run the candidate and the eager loop from the same inputs; keep eager's result, adopt the candidate
        only if it agrees."""
        reference = self.eager(x, frame, renormalize)
        try:
            candidate = self.fast(x, frame, renormalize)
            ok = agrees(candidate, reference, x.dtype)
        except Exception:  # noqa: BLE001 - a path that cannot run is dropped; eager goes on
            ok = False
        if ok:
            self.checked.add(renormalize)
            self.path = self._candidate_path
        else:
            self._drop(x, frame)
        return reference

    def _drop(self, x, frame) -> None:
        failed = self._candidate_path
        if failed == "traced" and self.fast.forget_cached():
            # A graph from an earlier run may be stale (the module changed since): trace afresh once.
            self._try_trace(x, frame)
            return
        if failed == "traced":
            mark_untraceable(self.owner, self.map, x, frame.shape[0], self.chunk_size)
        if failed == "compiled" and self.mode is True:
            warnings.warn(f"lyapunov_spectrum: torch.compile failed for '{self.map.name}'; running eagerly instead.",
                          RuntimeWarning, stacklevel=4)
        # A failed compile falls back to the traced graph when it was in use, otherwise to eager.
        self.fast = None
        self.checked = set()
        self.path = "eager"
        if failed == "compiled" and "traced" in self.paths_tried:
            self._try_trace(x, frame)


def _synchronize(x: torch.Tensor) -> None:
    """Timings need the device's queue drained (a no-op on CPU)."""
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)
