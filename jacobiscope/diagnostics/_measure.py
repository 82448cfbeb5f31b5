"""`measure(looped_map, x0)`: every registered diagnostic on one trajectory of one map, one typed result."""
from __future__ import annotations

import math
import time
import warnings

import torch

from ..errors import ArgumentError, ConvergenceWarning, NonFiniteWarning, SlowDerivativesWarning
from ..linalg._reverse_products import DERIVATIVES_KEY, REVERSE, uses_reverse_products
from ._base import MeasureContext, resolve
from .._validation import floating_dtype, nonnegative_int, positive_int, seed_int

__all__ = ["measure"]


def _one_trajectory(looped, x0):
    """The map with exactly one leading batch dimension of size 1, and its initial state ``[1, *state]``."""
    from ..maps import LoopedMap, as_looped_map

    looped = as_looped_map(looped)
    x0 = looped.prepare_state(x0)
    if looped.batch_dims == 1:
        if x0.shape[0] != 1:
            raise ArgumentError(f"measure takes one trajectory, got a batch of {x0.shape[0]} — pass x0[i:i+1] for "
                                "trajectory i (analyze runs several)")
        return looped, x0
    if looped.batch_dims > 1:
        raise ArgumentError(f"measure takes maps with at most one batch dimension, got batch_dims={looped.batch_dims} "
                            "— reshape the batch into one dimension")
    # A single-trajectory map: give it a batch dimension of size 1, so every diagnostic sees one convention.
    drive = looped.drive_function
    batched = LoopedMap(lambda x: looped.step(x[0]).unsqueeze(0), batch_dims=1,
                        drive=(lambda x: drive(x[0]).unsqueeze(0)) if drive is not None else None,
                        x0=x0.unsqueeze(0), name=looped.name)
    batched.meta = dict(looped.meta, unbatched_original=True)  # readouts take the original map's own layout
    return batched, x0.unsqueeze(0)


def measure(looped_map, x0=None, *, loops: int = 32, diagnostics=None, k: int = 4, eigen_k: int = 4,
            eigen_restarts: int = 4, spectral_samples: int = 3, seed: int = 0, dtype: torch.dtype | None = None,
            label: str | None = None, input_index: int = 0, mode: str | None = None, options: dict | None = None):
    """Run the registered diagnostics on one trajectory of ``looped_map`` from ``x0``; return a `LayerResult`.

    Example::

        >>> import torch, jacobiscope
        >>> row = jacobiscope.measure(lambda x: torch.tanh(0.5 * x) + 1, torch.ones(3, dtype=torch.float64), loops=20)
        >>> row.regime, round(row.lyapunov["exponents"][0], 2)   # log F'(x*) = -1.334 at the fixed point
        ('converging', -1.3)

    Arguments:
        looped_map: a `LoopedMap` (one trajectory: no batch dimension, or one of size 1) or any callable
            ``state -> state``.
        x0: the initial state (default: the map's ``x0``).
        loops: how many times the map is applied.
        diagnostics: names of registered diagnostics (`list_diagnostics`; default: every default one, with what
            they require). The regime verdict always runs.
        k: Lyapunov exponents; eigen_k, eigen_restarts: eigenvalues and Arnoldi restarts; spectral_samples: loops
            at which ``||J||_2`` is measured; seed: of every random start vector.
        dtype: compute in this dtype (a copy of the map; float64 for reference-quality numbers).
        label, input_index, mode: how the row is named in reports.
        options: settings of diagnostics that take their own (``{"basin_starts": 16, "basin_noise": 0.05}`` for
            ``fixed_points``; ``{"halting_thresholds": [...]}`` for ``halting``), read from ``context.options``.

    Returns:
        A `jacobiscope.LayerResult`: state norms and step sizes along the loop, each built-in diagnostic in its
        field, any other registered diagnostic's result in ``row.extra[name]``, the regime verdict with its evidence,
        and flags (a trajectory that went NaN/Inf is flagged with its loop; the finite part is still measured).
    """
    from ..report import LayerResult

    _check_arguments(loops, diagnostics, k, eigen_k, eigen_restarts, spectral_samples, seed, dtype, options)
    chosen = resolve(diagnostics)
    started = time.perf_counter()
    looped, x0 = _one_trajectory(looped_map, x0)
    if dtype is not None:
        looped, x0 = looped.to(dtype=dtype), x0.to(dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NonFiniteWarning)
        warnings.simplefilter("always", ConvergenceWarning)
        context = _context(looped, x0, loops, dict(options or {}, k=k, eigen_k=eigen_k, eigen_restarts=eigen_restarts,
                                                    spectral_samples=spectral_samples, seed=seed))
        timings = {}
        for diagnostic in chosen:
            begun = time.perf_counter()
            context.results[diagnostic.name] = diagnostic.compute(context)
            timings[diagnostic.name] = time.perf_counter() - begun
    for warning in caught:
        if issubclass(warning.category, ConvergenceWarning):
            context.flags.append(f"not converged: {str(warning.message).split('.')[0]}")
        elif issubclass(warning.category, SlowDerivativesWarning):
            warnings.warn(warning.message, SlowDerivativesWarning, stacklevel=2)
    if uses_reverse_products(looped) and isinstance(getattr(looped_map, "meta", None), dict):
        looped_map.meta[DERIVATIVES_KEY] = REVERSE  # the caller's map (measured through a copy) learns it too
    values, extra = {}, {}
    for diagnostic in chosen:
        result = context.results[diagnostic.name]
        if hasattr(diagnostic, "fields"):
            values.update(diagnostic.fields(result))
        else:
            extra[diagnostic.name] = result.to_dict() if hasattr(result, "to_dict") else result
    return LayerResult(
        input_index=input_index, input_label=label or looped.name, layer=looped.meta.get("layer", 0),
        mode=mode or looped.meta.get("mode", "loop"), eta=looped.meta.get("eta"), loops=loops,
        state_shape=list(context.states.shape[1:]), dtype=str(context.states.dtype).replace("torch.", ""),
        state_norm=context.state_norm, step_size=context.step_size,
        spectral_norm=values.get("spectral_norm", []), eigenvalues=values.get("eigenvalues"),
        eigen_loop=values.get("eigen_loop"), oscillation=values.get("oscillation"), lyapunov=values.get("lyapunov"),
        clusters=values.get("clusters"), energy=values.get("energy"), regime=values.get("regime", "unknown"),
        evidence=values.get("evidence", {}), flags=context.flags, seconds=time.perf_counter() - started,
        extra=extra or None, timings=timings)


def _check_arguments(loops, diagnostics, k, eigen_k, eigen_restarts, spectral_samples, seed, dtype, options) -> None:
    """Every argument of `measure`, named as measure knows it, before any loop runs (a bad ``eigen_k`` used to
    surface as "k must be ..." from the eigen solver, spectral_samples=0 as an empty list)."""
    positive_int(loops, "loops")
    if diagnostics is not None:
        names = [diagnostics] if isinstance(diagnostics, str) else diagnostics
        if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
            raise ArgumentError(f"diagnostics must be None, a name or a list of names, got {diagnostics!r} — pass "
                                "e.g. diagnostics=['spectral_norm', 'lyapunov'] (jacobiscope.list_diagnostics()).")
        if not names:
            raise ArgumentError("diagnostics=[] selects nothing to measure — pass None for the defaults, names from "
                                "jacobiscope.list_diagnostics(), or ['regime'] for state norms and the verdict only.")
    for value, name in ((k, "k"), (eigen_k, "eigen_k"), (spectral_samples, "spectral_samples")):
        positive_int(value, name)
    nonnegative_int(eigen_restarts, "eigen_restarts")
    seed_int(seed)
    floating_dtype(dtype, "dtype")
    if options is not None and not isinstance(options, dict):
        raise ArgumentError(f"options must be a dict of diagnostic settings, got {type(options).__name__} — pass e.g. "
                            "options={'basin_starts': 16}.")


def _context(looped, x0, loops: int, options: dict) -> MeasureContext:
    states = looped.trajectory(x0, loops, on_nonfinite="ignore")[:, 0]  # [loops + 1, *state]
    finite = torch.isfinite(states.reshape(loops + 1, -1)).all(1)
    nonfinite_loop = int((~finite).nonzero()[0]) if not bool(finite.all()) else -1
    flags = [f"NaN/Inf at loop {nonfinite_loop}"] if nonfinite_loop >= 0 else []
    tokens = states.shape[1] if states.dim() > 2 else 1
    flat = states.reshape(loops + 1, -1)
    frobenius = flat.norm(dim=1)
    return MeasureContext(
        looped=looped, x0=x0, states=states, loops=loops,
        last_finite=loops if nonfinite_loop < 0 else nonfinite_loop - 1, nonfinite_loop=nonfinite_loop,
        state_norm=(frobenius / math.sqrt(tokens)).tolist(),
        step_size=((flat[1:] - flat[:-1]).norm(dim=1) / frobenius[:-1].clamp_min(1e-30)).tolist(),
        options=options, flags=flags)
