"""Which way to run the loops of a Lyapunov run: eager, on a recording (split or traced), or ``torch.compile`` —
chosen by cost.

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

1. The first two loops run eagerly and are timed. When the eager time this run still has to go, plus the eager jvp
   time earlier work spent on the same map at states of this shape (Lyapunov runs of any k, and the Krylov products
   of the spectral norm and the eigenvalues: all would share the recording) exceeds the expected cost of a recording
   (`trace_cost_seconds`), the step's jvp is recorded and split at the state (`jacobiscope.linalg._linearized`):
   each loop then runs the forward's part once and the linear part once per frame vector ("linearized"). A short
   run on a new map stays eager, so it is never slowed down; a recording made by anyone (the Krylov products of an
   ``analyze`` call, another layer of the same structure) is used from the first loop.
2. For k > 1 a second recording may be faster: the ``vmap`` of the jvp over the frame, traced as one graph
   ("traced", `_tangent_trace`) — it is when the map is dispatch-bound (HRM-Text, k = 4: 3.9 forwards a loop
   against 6.3), not when it is arithmetic-bound (256 x 512 attention, k = 16: 32.8 against 23.9). Each path's loop
   is timed over 16 loops and remembered per map and call (owner, k, state shape); once the linearized loops of a
   call have cost what the traced graph's recording costs, it is tried and timed, and every later run takes the
   faster of the two at once.
3. A recorded loop is timed over 16 loops; when the rest of the run would still take more than
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

from ..linalg._linearized import SplitSlot, split_graph
from ..linalg._reverse_products import uses_reverse_products
from ..linalg._trace import agrees, shared_cache
from ._tangent_linearized import linearized_tangent_step
from ._tangent_step import compiled_tangent_step, eager_tangent_step
from ._tangent_trace import UNTRACEABLE, cached_graph, mark_untraceable, trace_cost_seconds, traced_tangent_step

__all__ = ["LoopRunner", "measured_loop_seconds"]

_TIMED_EAGER_LOOPS = 2
_TIMED_FAST_LOOPS = 16
_COMPILE_PAYOFF_SECONDS = 120.0  # a 10-20 s compilation (CPU), recouped when compiled loops are >= 1.2x faster
_MIN_LOOPS_FOR_CACHED_GRAPH = 4  # a cached graph still costs one checking loop
# A run leaves the recorded path it is on only for one measured this much faster: a switch costs a checking loop
# (eager), and timings of two paths within a few percent of each other would otherwise flip it run after run.
_SWITCH_MARGIN = 0.9
# Per map owner and call (k, state shape, dtype, device): each recorded path's measured seconds a loop, and the
# linearized loop time spent since the traced graph was last considered. Kept where the graphs are (`shared_cache`):
# modules of one structure (the layers of a model) share it as they share the graphs. Function owners are held
# weakly; maps without an owner share `_UNOWNED`.
_LEDGERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_UNOWNED: dict = {}


def _ledger_for(owner) -> dict:
    ledger = shared_cache(owner, _LEDGERS)
    return _UNOWNED if ledger is None else ledger


def measured_loop_seconds(owner, key) -> dict:
    """``{path: seconds a loop}`` measured for this owner's call ``key`` (k, state shape, dtype, device)."""
    ledger = _ledger_for(owner)
    return {path: ledger[("loop seconds", path, *key)] for path in ("linearized", "traced")
            if ("loop seconds", path, *key) in ledger}


class LoopRunner:
    """``runner(x, frame, renormalize)``: one loop on the current path (``path``: eager, linearized, traced or
    compiled)."""

    def __init__(self, looped_map, owner, *, batch: int, chunk_size, compile, total_loops: int):
        self.map = looped_map
        self.owner = owner
        self.batch = batch
        self.chunk_size = chunk_size
        self.mode = compile
        self.total = total_loops
        self.loop = 0
        self.eager = eager_tangent_step(looped_map, batch, chunk_size)
        self.fast = None  # a recorded or compiled TangentStep on trial or in use
        self.checked: set[bool] = set()  # the variants (renormalize or not) of `fast` that agreed with eager
        self.path = "eager"
        self.paths_tried: list[str] = []
        self._candidate_path = "eager"
        self._eager_timings: list[float] = []
        self._fast_started: float | None = None
        self._fast_loops = 0
        self._key = None  # (k, state shape, dtype, device), set at the first loop
        self._slot = None  # where the split graph and its ledger live for this run's states (SplitSlot)
        self._linearized_from_earlier_work = False

    def __call__(self, x: torch.Tensor, frame: torch.Tensor, renormalize: bool):
        self.loop += 1
        if self.loop == 1:
            self._key = (frame.shape[0], tuple(x.shape), x.dtype, str(x.device))
            self._slot = SplitSlot(self.map, x, self.owner)
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

    def _spend(self, seconds: float) -> None:
        # What a recording of the split graph would have saved: shared with the Krylov products of the same map.
        self._slot.spend(seconds)

    # ------------------------------------------------------------------ decisions
    def _choose_first_path(self, x, frame) -> None:
        if self.mode is True:
            self._try(compiled_tangent_step(self.map, self.batch, self.chunk_size), "compiled")
            return
        if self.mode is not None or self.total < _MIN_LOOPS_FOR_CACHED_GRAPH:
            return
        traced = cached_graph(self.owner, self.map, x, frame.shape[0], self.chunk_size)
        traced_ready = traced is not None and traced is not UNTRACEABLE
        known = measured_loop_seconds(self.owner, self._key)
        if traced_ready and ("traced" not in known or known["traced"] < known.get("linearized", float("inf"))):
            self._try_trace(x, frame)  # the faster one, or a recording nobody has timed yet (it costs nothing now)
        elif not self._try_linearized(x, record=False) and traced_ready:
            self._try_trace(x, frame)

    def _after_timed_eager_loop(self, x, frame, started: float) -> None:
        _synchronize(x)
        seconds = time.perf_counter() - started
        self._spend(seconds)
        self._eager_timings.append(seconds)
        if len(self._eager_timings) != _TIMED_EAGER_LOOPS or self.paths_tried:
            return
        per_loop = min(self._eager_timings)
        remaining = (self.total - self.loop) * per_loop
        if remaining > 0 and self._slot.spent() + remaining >= trace_cost_seconds(per_loop):
            if not self._try_linearized(x, record=True):
                if cached_graph(self.owner, self.map, x, frame.shape[0], self.chunk_size) is not UNTRACEABLE:
                    self._try_trace(x, frame)

    def _after_fast_loop(self, x) -> None:
        if self.mode is not None or self.path not in ("linearized", "traced"):
            return
        self._fast_loops += 1
        if self._fast_loops == 1:
            _synchronize(x)
            self._fast_started = time.perf_counter()
        elif self._fast_loops == 1 + _TIMED_FAST_LOOPS:
            _synchronize(x)
            per_loop = (time.perf_counter() - self._fast_started) / _TIMED_FAST_LOOPS
            _ledger_for(self.owner)[("loop seconds", self.path, *self._key)] = per_loop
            if (self.total - self.loop) * per_loop >= _COMPILE_PAYOFF_SECONDS:
                self._try(compiled_tangent_step(self.map, self.batch, self.chunk_size), "compiled")
            else:
                self._compare_recordings(x, per_loop)

    def _compare_recordings(self, x, per_loop: float) -> None:
        """Take the linearized loop back when the traced graph turned out slower; try the traced graph (k > 1) once
        the linearized loops of this call have cost what its recording costs."""
        known = measured_loop_seconds(self.owner, self._key)
        if self.path == "traced":
            if known.get("linearized", float("inf")) < _SWITCH_MARGIN * per_loop:
                self._try_linearized(x, record=False)
            return
        if known.get("traced", float("inf")) < _SWITCH_MARGIN * per_loop:
            traced = cached_graph(self.owner, self.map, x, self._key[0], self.chunk_size)
            if traced is not None and traced is not UNTRACEABLE:
                self._try_trace(x, None)
            return
        k = self._key[0]
        if k == 1 or "traced" in known or "traced" in self.paths_tried:
            return  # k = 1: no vmap to gain from
        if cached_graph(self.owner, self.map, x, k, self.chunk_size) is UNTRACEABLE:
            return
        ledger, key = _ledger_for(self.owner), ("linearized seconds", *self._key)
        ledger[key] = ledger.get(key, 0.0) + self.total * per_loop  # this run's linearized loops, counted once
        if ledger[key] >= trace_cost_seconds(per_loop):
            ledger[key] = 0.0
            self._try_trace(x, None)

    def _try_linearized(self, x, *, record: bool) -> bool:
        if uses_reverse_products(self.map):
            return False
        earlier = split_graph(self.map, x, self.owner, record=False)
        graph = earlier if earlier is not None else split_graph(self.map, x, self.owner, record=record)
        if graph is None:
            return False
        self._linearized_from_earlier_work = earlier is not None
        self._try(linearized_tangent_step(self.map, x, batch=self.batch, owner=self.owner, graph=graph),
                  "linearized")
        return True

    def _try_trace(self, x, frame) -> None:
        self._try(traced_tangent_step(self.map, self.batch, self.chunk_size, owner=self.owner), "traced")

    def _try(self, step, path: str) -> None:
        if uses_reverse_products(self.map):  # double-backward products: torch.func (trace, compile) cannot run them
            return
        if path not in self.paths_tried:
            self.paths_tried.append(path)
        self.fast, self.checked, self._candidate_path = step, set(), path
        self._fast_loops = 0

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
        if failed == "linearized":
            stale = self._linearized_from_earlier_work and self.mode is None
            self._slot.forget(getattr(self.fast, "graph", None), record_again=stale)
            if stale and self._try_linearized(x, record=True):  # recorded afresh, once
                return
        if failed == "compiled" and self.mode is True:
            warnings.warn(f"lyapunov_spectrum: torch.compile failed for '{self.map.name}'; running eagerly instead.",
                          RuntimeWarning, stacklevel=4)
        # A failed compile falls back to the recording that was in use; a failed recording to the other one.
        self.fast = None
        self.checked = set()
        self.path = "eager"
        if failed == "compiled" and "traced" in self.paths_tried:
            self._try_trace(x, frame)
        elif failed == "compiled" and "linearized" in self.paths_tried:
            self._try_linearized(x, record=False)
        elif failed == "linearized" and "traced" not in self.paths_tried and self.mode is None:
            if cached_graph(self.owner, self.map, x, frame.shape[0], self.chunk_size) is not UNTRACEABLE:
                self._try_trace(x, frame)


def _synchronize(x: torch.Tensor) -> None:
    """Timings need the device's queue drained (a no-op on CPU)."""
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)
