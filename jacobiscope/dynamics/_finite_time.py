"""Finite-time Lyapunov exponents from several tangent starts: their spread is the honest error bar of a short run.

Example::

    >>> import torch, jacobiscope
    >>> A = torch.tensor([[2.0, 1.0], [0.0, 0.5]], dtype=torch.float64)
    >>> x0 = torch.ones(2, dtype=torch.float64)
    >>> short = jacobiscope.finite_time_exponents(lambda x: A @ x, x0, loops=16)      # 8 starts, top-1 each
    >>> long = jacobiscope.finite_time_exponents(lambda x: A @ x, x0, loops=256)
    >>> short.exponents.shape, round(float(long.mean[0]), 2)                          # log 2 = 0.69
    (torch.Size([8, 1]), 0.69)
    >>> round(float(short.std[0]), 3), round(float(long.std[0]), 4)                   # the spread shrinks as 1/T
    (0.055, 0.0034)
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field

import torch

from ..errors import ArgumentError, StepError
from ..linalg.operators import forward_ad_context
from ..maps import LoopedMap, as_looped_map, steps_per_loop
from .._validation import (_is_int, floating_dtype, nonnegative_int, optional_positive_int, positive_int, seed_int,
                           within_budget)
from .lyapunov import lyapunov_spectrum

__all__ = ["finite_time_exponents", "FiniteTimeExponents"]


@dataclass
class FiniteTimeExponents:
    """What `finite_time_exponents` returns: one independent estimate per tangent start. Exponents in nats per loop.

    Attributes:
        exponents: ``[starts, *batch, k]``, each start's exponents over ``loops`` loops, largest first.
        history: ``[loops, starts, *batch, k]``, the running estimate of each start after each loop (row ``t - 1``:
            the exponent over loops 1..t).
        mean, std, minimum, maximum: ``[*batch, k]``, over the starts (``std`` with Bessel's correction).
        start_frames: ``[starts, k, *batch, *state]``, the tangent frame each start began from (float64; the
            engine orthonormalizes each frame, so a start's first exponent follows its first vector).
        nonfinite_step: ``[starts, *batch]``, the loop at which a start's trajectory went NaN/Inf, or -1.
        loops, transient: the loops averaged over, and those run before (the frame evolved, nothing counted).
        batched: whether the starts ran as one vmapped batch (False: one after another, for a step that vmap
            cannot batch).
        meta: the engine's settings (dtype, device, seed, map name, state size).
    """

    exponents: torch.Tensor
    history: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    minimum: torch.Tensor
    maximum: torch.Tensor
    start_frames: torch.Tensor
    nonfinite_step: torch.Tensor
    loops: int
    transient: int
    batched: bool
    meta: dict = field(default_factory=dict)

    @property
    def starts(self) -> int:
        return int(self.exponents.shape[0])

    @property
    def spread(self) -> torch.Tensor:
        """``maximum - minimum`` over the starts, ``[*batch, k]`` (0 where every start is at -inf)."""
        spread = self.maximum - self.minimum
        return torch.where(self.maximum == -math.inf, torch.zeros_like(spread), spread)

    def __repr__(self) -> str:
        top = self.mean.reshape(-1, self.mean.shape[-1])[0, 0]
        sd = self.std.reshape(-1, self.std.shape[-1])[0, 0]
        return (f"FiniteTimeExponents(starts={self.starts}, loops={self.loops}, k={self.exponents.shape[-1]}, "
                f"lambda_1 = {float(top):.4g} +/- {float(sd):.2g} (std over starts))")


def finite_time_exponents(
    step,
    x0: torch.Tensor | None = None,
    loops: int = 32,
    k: int = 1,
    starts: int = 8,
    seed: int = 0,
    *,
    transient: int = 0,
    dtype: torch.dtype | None = None,
    batch_dims: int | None = None,
    chunk_size: int | None = None,
) -> FiniteTimeExponents:
    """The top-``k`` finite-time Lyapunov exponents of ``X_{t+1} = F(X_t)`` over ``loops`` loops from ``starts``
    independent random tangent frames along the one orbit of ``x0``.

    Example::

        >>> import jacobiscope
        >>> henon = jacobiscope.systems.henon_map()
        >>> ft = jacobiscope.finite_time_exponents(henon, henon.x0, loops=500, starts=4, transient=100)
        >>> ft.exponents.shape, ft.history.shape
        (torch.Size([4, 1]), torch.Size([500, 4, 1]))
        >>> round(float(ft.mean[0]), 1), float(ft.spread[0]) < 1e-9    # the transient aligned every start
        (0.4, True)

    Arguments:
        step: a `LoopedMap` or a callable ``state -> state`` (a batched map gives ``[*batch]`` results per start).
        x0: the initial state (default: the map's ``x0``).
        loops: loops over which each exponent is averaged (after ``transient``).
        k: exponents per start (each start renormalizes its own ``k``-frame by QR; ``k=1`` is the top exponent).
        starts: independent tangent starts, at least 2 (their standard deviation is the error bar).
        seed: seed of the start frames, drawn in float64 on the CPU so every device and dtype begins alike.
        transient, dtype, batch_dims, chunk_size: as for `jacobiscope.lyapunov_spectrum`.

    Returns:
        `FiniteTimeExponents`: per-start exponents and running estimates, their mean, std, minimum and maximum.

    The starts run as one batch of trajectories through the engine (`lyapunov_spectrum` on the step vmapped over a
    leading ``starts`` dimension): every start is its own trajectory, renormalized on its own, so each is an
    independent estimate rather than one column of a QR of all starts together. A step that vmap cannot batch
    (data-dependent Python control flow) runs start by start instead (``batched=False``), with the same numbers.
    """
    loops = positive_int(loops, "loops")
    k = within_budget(k, "k", unit="tangent vectors")
    transient = nonnegative_int(transient, "transient")
    chunk_size = optional_positive_int(chunk_size, "chunk_size")
    floating_dtype(dtype, "dtype")
    seed = seed_int(seed)
    if not _is_int(starts) or starts < 2:
        raise ArgumentError(f"starts must be an int >= 2 (the spread of one start is undefined), got {starts!r} — "
                            "pass e.g. starts=8, or call jacobiscope.lyapunov_spectrum for a single estimate.")
    starts = int(starts)
    # starts trajectories of transient + loops each: the work is their product, checked against the loop budget
    within_budget(transient + loops, "transient + loops", "loops", per_unit=starts * steps_per_loop(step),
                  unit="loops of the step over all starts")
    looped = as_looped_map(step, batch_dims=batch_dims).detached()
    if dtype is not None:
        looped = looped.to(dtype=dtype)
    x = looped.prepare_state(x0)
    frames = _start_frames(x, starts, k, seed)
    options = {"steps": loops, "k": k, "transient": transient, "chunk_size": chunk_size}
    try:
        results, batched = [_run_batched(looped, x, frames, options)], True
    except StepError:
        # vmap refuses data-dependent control flow; one start at a time needs no vmap over the state (a genuine
        # fault of the step raises again here, from the unbatched map).
        results, batched = _run_one_by_one(looped, x, frames, options), False
    return _assemble(results, batched, frames, loops, transient, k)


def _start_frames(x: torch.Tensor, starts: int, k: int, seed: int) -> torch.Tensor:
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(starts, k, *x.shape, generator=generator, dtype=torch.float64)


def _replicated_map(looped: LoopedMap, starts: int) -> LoopedMap:
    """The map on ``[starts, *batch, *state]``: the same step on every start's copy of the state."""
    replicated = LoopedMap(torch.func.vmap(looped.step), batch_dims=looped.batch_dims + 1,
                           name=f"{looped.name} (x{starts} starts)")
    replicated.copy_info_from(looped)
    return replicated


def _run_batched(looped: LoopedMap, x: torch.Tensor, frames: torch.Tensor, options: dict):
    starts = frames.shape[0]
    state = x.detach().unsqueeze(0).expand(starts, *x.shape).clone()
    tangents = frames.transpose(0, 1).to(device=x.device, dtype=x.dtype)  # the engine's [k, *batch, *state]
    # The fused sdpa kernels have no vmap batching rule (a slow per-start loop, and a warning each call): the
    # engine's own forward checks run on the math backend too, as its jvps do.
    with forward_ad_context():
        return lyapunov_spectrum(_replicated_map(looped, starts), state, tangents=tangents, **options)


def _run_one_by_one(looped: LoopedMap, x: torch.Tensor, frames: torch.Tensor, options: dict) -> list:
    return [lyapunov_spectrum(looped, x, tangents=frame.to(device=x.device, dtype=x.dtype), **options)
            for frame in frames]


def _assemble(results, batched, frames, loops, transient, k) -> FiniteTimeExponents:
    if batched:
        (result,) = results
        exponents, history, nonfinite = result.exponents, result.history, result.nonfinite_step
    else:
        exponents = torch.stack([r.exponents for r in results])
        history = torch.stack([r.history for r in results], dim=1)
        nonfinite = torch.stack([r.nonfinite_step for r in results])
    meta = dict(results[0].meta, starts=frames.shape[0], batched=batched)
    std = exponents.std(0, unbiased=True)
    # every start at -inf (an annihilated tangent: exact): no spread, where -inf - -inf would make it NaN
    std = torch.where((exponents == -math.inf).all(0), torch.zeros_like(std), std)
    return FiniteTimeExponents(
        exponents=exponents, history=history, mean=exponents.mean(0), std=std,
        minimum=exponents.min(0).values, maximum=exponents.max(0).values, start_frames=frames,
        nonfinite_step=nonfinite, loops=loops, transient=transient, batched=batched, meta=meta,
    )
