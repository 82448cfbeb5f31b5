"""Lyapunov exponents of a looped map: the QR (Benettin) method on vmapped jvps, and a two-trajectory check."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch

from ..errors import ArgumentError, NonFiniteWarning
from ..linalg.operators import check_map_at
from ..maps import as_looped_map, require_precision
from .._validation import (one_of, floating_dtype, nonnegative_int, optional_positive_int, positive_int, positive_number,
                           seed_int, within_budget)
from ._dense_tangent import dense_pays, dense_qr_rows
from ._tangent_policy import LoopRunner
from ._tangent_step import orthonormalize_frame

__all__ = ["lyapunov_spectrum", "LyapunovResult", "kaplan_yorke_dimension"]


@dataclass
class LyapunovResult:
    """What `lyapunov_spectrum` returns. Exponents are in nats per loop.

    Attributes:
        exponents: ``[*batch, k]``, largest first. NaN for a trajectory that went NaN/Inf (see ``nonfinite_step``).
        history: running estimates ``[n_records, *batch, k]`` after each renormalization (columns in the same
            order as ``exponents``); ``history_steps`` gives the loop index (after the transient) of each row.
        finite_time: the local (finite-time) exponents of each renormalization interval,
            ``[n_records, *batch, k]``: ``log R_ii / reorth_every``. Their mean is ``exponents``.
        stderr: standard error of ``exponents`` ``[*batch, k]`` from batch means of ``finite_time`` (10 blocks),
            which accounts for the correlation between neighbouring intervals.
        kaplan_yorke: the Kaplan–Yorke dimension ``[*batch]`` from the computed exponents (NaN when the ``k``
            computed exponents still sum to a positive number, so more are needed).
        final_state: the state after the run, ``[*batch, *state]``.
        final_tangents: the orthonormal tangent frame after the run, ``[k, *batch, *state]`` (k=1: a unit vector).
        nonfinite_step: ``[*batch]`` loop index (counting the transient) at which each trajectory first became
            NaN/Inf, or -1.
        method: ``"qr"`` or ``"two_trajectory"``.
        meta: steps, transient, reorth_every, dtype, device, seed, map name.
    """

    exponents: torch.Tensor
    history: torch.Tensor
    history_steps: torch.Tensor
    finite_time: torch.Tensor
    stderr: torch.Tensor
    kaplan_yorke: torch.Tensor
    final_state: torch.Tensor
    final_tangents: torch.Tensor | None
    nonfinite_step: torch.Tensor
    method: str
    meta: dict = field(default_factory=dict)

    @property
    def max_exponent(self) -> torch.Tensor:
        """The largest exponent, ``[*batch]``."""
        return self.exponents[..., 0]

    @property
    def flagged(self) -> bool:
        """Whether any trajectory went NaN/Inf."""
        return bool((self.nonfinite_step >= 0).any())


def lyapunov_spectrum(
    step,
    x0: torch.Tensor | None = None,
    steps: int = 100,
    k: int = 1,
    *,
    transient: int = 0,
    reorth_every: int = 1,
    dtype: torch.dtype | None = None,
    method: str = "qr",
    seed: int = 0,
    tangents: torch.Tensor | None = None,
    perturbation: float | None = None,
    chunk_size: int | None = None,
    batch_dims: int | None = None,
    compile: bool | None = None,
) -> LyapunovResult:
    """The ``k`` largest Lyapunov exponents of the looped map ``X_{t+1} = F(X_t)`` along the orbit of ``x0``.

    Example::

        >>> import torch, jacobiscope
        >>> henon = jacobiscope.systems.henon_map()
        >>> result = jacobiscope.lyapunov_spectrum(henon, henon.x0, steps=2000, k=2, transient=100)
        >>> [round(float(v), 1) for v in result.exponents]
        [0.4, -1.6]

    Arguments:
        step: a `LoopedMap` or a callable ``state -> state``. A batched map (``batch_dims >= 1``) gives one
            spectrum per trajectory.
        x0: initial state (default: the map's ``x0``).
        steps: loops over which exponents are averaged (after the transient).
        k: number of exponents (tangent vectors), at most the state size ``D``.
        transient: loops run first, without accumulating; the tangent frame is still evolved and
            re-orthonormalized so it is aligned when accumulation starts (as ChaosTools does).
        reorth_every: loops between QR re-orthonormalizations. Longer intervals save QRs but risk an
            ill-conditioned frame; 1 is the safe default.
        dtype: compute in this dtype (``torch.float64`` for reference-quality numbers); the map's parameters
            are cast when it wraps an ``nn.Module``.
        method: ``"qr"`` (Benettin/Shimada–Nagashima: the tangent frame ``Q`` (D x k) is pushed forward as ``k``
            vmapped jvps, ``Q, R = qr(J Q)`` with ``diag R > 0``, and ``lambda_i = mean log R_ii``; the Jacobian is
            never formed) or ``"two_trajectory"`` (the largest exponent only, from a nearby orbit renormalized to
            distance ``perturbation`` every loop: an independent cross-check that uses no derivatives).
        seed: seed of the random orthonormal initial frame.
        tangents: optional initial frame ``[k, *batch, *state]`` (e.g. ``final_tangents`` of a previous run).
        perturbation: initial distance for ``"two_trajectory"`` (default ``sqrt(eps) * max(1, ||x0||)``).
        chunk_size: vmap chunk size for the ``k`` jvps (None: all at once where they fit in half the free memory,
            else as many as fit).
        compile: how the loops run. ``None`` (default) chooses by cost, with no flag needed: a run long enough
            to pay for it (counting the eager jvp time earlier work on this map spent) records the step's jvp once
            as a graph of plain tensor operations, split at the state, and replays it (``"linearized"``; eager
            forward-mode AD spends most of its time on bookkeeping: the replay runs 2-4x faster on small maps;
            the Krylov products of the same map share the recording); for k > 1 the ``vmap`` of the jvp traced as
            one graph (``"traced"``) is also timed, and the faster kept; a run that would still take minutes is
            compiled with ``torch.compile``; every switch is checked against the eager loop and dropped
            silently if it fails or disagrees (the result's ``meta["tangent_path"]`` says which path ran).
            ``False``: always eager forward-mode AD. ``True``: ``torch.compile`` from the first loop (a one-off compilation of
            10-20 s on CPU), eager with a warning if compilation fails.

    Returns:
        `LyapunovResult` with exponents, running-estimate history, finite-time exponents, standard errors,
        Kaplan–Yorke dimension and final state / frame.

    A trajectory that becomes NaN/Inf is flagged (``nonfinite_step``, NaN exponents, a `NonFiniteWarning`);
    the other trajectories of the batch are unaffected.

    References: Benettin, Galgani, Giorgilli & Strelcyn, Meccanica 15 (1980); Shimada & Nagashima, Prog. Theor.
    Phys. 61 (1979); Kaplan & Yorke, LNM 730 (1979).
    """
    # Arguments first (cheap), then the state, then one checked step: nothing runs on a bad call.
    steps, k, transient, reorth_every, seed, perturbation = _checked_options(
        step, method, steps, k, transient, reorth_every, seed, perturbation, chunk_size, compile, dtype)
    given = as_looped_map(step, batch_dims=batch_dims)
    owner = given.module if given.module is not None else given._function  # the key of traced graphs
    looped_map = given.detached()
    if dtype is not None:
        looped_map = looped_map.to(dtype=dtype)
    x = looped_map.prepare_state(x0)
    require_precision(x, "lyapunov_spectrum")
    size = looped_map.state_size(x)
    if k > size:
        raise ArgumentError(
            f"k={k} tangent vectors cannot exceed the state size D={size}: a D-dimensional map has D exponents. "
            f"Use k<={size}."
        )
    if tangents is not None:
        _check_tangents(tangents, x, k, looped_map)
    # No graph for weights a plain-callable map closes over (detached() reaches only an nn.Module's parameters).
    with torch.no_grad():
        check_map_at(looped_map, x, "lyapunov_spectrum", derivatives=method == "qr")
    meta = {
        "map": looped_map.name,
        "steps": steps,
        "transient": transient,
        "reorth_every": reorth_every,
        "k": k,
        "dtype": str(x.dtype),
        "device": str(x.device),
        "seed": seed,
        "state_size": size,
    }
    if method == "two_trajectory":
        return _two_trajectory(looped_map, x, steps, transient, perturbation, seed, meta)
    return _qr_method(looped_map, x, steps, k, transient, reorth_every, seed, tangents, chunk_size, meta, compile,
                      owner)


def _checked_options(step, method, steps, k, transient, reorth_every, seed, perturbation, chunk_size, compile,
                     dtype) -> tuple:
    """The options of `lyapunov_spectrum`, each checked (and normalized: numpy ints to ints) before anything runs."""
    one_of(method, "method", ("qr", "two_trajectory"))
    steps = positive_int(steps, "steps")
    reorth_every = positive_int(reorth_every, "reorth_every")
    transient = nonnegative_int(transient, "transient")
    # transient + steps loops run, k jvps each: both against their budgets before the first loop.
    from ..maps import steps_per_loop

    power = steps_per_loop(step)
    within_budget(transient + steps, "transient + steps", "loops", per_unit=power, unit="loops of the step")
    k = within_budget(k, "k")
    if method == "two_trajectory" and k != 1:
        raise ArgumentError("method='two_trajectory' estimates the largest exponent only: use k=1.")
    seed = seed_int(seed)
    optional_positive_int(chunk_size, "chunk_size")
    perturbation = positive_number(perturbation, "perturbation")  # 0 or NaN gave NaN exponents without a word
    if compile is not None and not isinstance(compile, bool):
        raise ArgumentError(f"compile must be None (choose by cost), True or False, got {compile!r} — pass "
                            "compile=None.")
    floating_dtype(dtype, "dtype")
    return steps, k, transient, reorth_every, seed, perturbation


def _check_tangents(tangents, x, k, looped_map) -> None:
    """An initial frame ``[k, *batch, *state]``, finite, with ``k`` independent vectors per trajectory.

    A zero or dependent frame has a zero ``R_ii``: its exponent would be ``log 0`` and come back NaN (flagged as if
    the orbit had diverged), so it is refused here with the reason.
    """
    expected = (k, *x.shape)
    if not isinstance(tangents, torch.Tensor):
        raise ArgumentError(f"tangents must be a torch.Tensor of shape {list(expected)} ([k, *batch, *state]), got "
                            f"{type(tangents).__name__} — pass e.g. final_tangents of a previous run, or None.")
    if tuple(tangents.shape) != expected:
        raise ArgumentError(f"tangents must have shape {list(expected)} ([k, *batch, *state]), got "
                            f"{list(tangents.shape)} — pass final_tangents of a previous run with the same k, or None.")
    if tangents.is_complex() or tangents.dtype == torch.bool:
        raise ArgumentError(f"tangents must be real, got {tangents.dtype} — pass a float tensor, or None.")
    batch = int(looped_map.batch_shape(x).numel())
    frame = tangents.detach().to(device=x.device, dtype=torch.float64).reshape(k, batch, -1).permute(1, 2, 0)
    if not bool(torch.isfinite(frame).all()):
        raise ArgumentError("tangents contain NaN or Inf — pass a finite frame, or None for a random one.")
    singular = torch.linalg.svdvals(frame)  # [batch, k], descending
    rank_tol = singular[:, :1] * max(frame.shape[1], k) * torch.finfo(x.dtype).eps
    if not bool((singular[:, -1] > rank_tol[:, 0]).all()):
        raise ArgumentError(f"tangents must hold k={k} linearly independent vectors per trajectory (a zero or "
                            "repeated vector has no exponent) — pass an independent frame, or None for a random one.")


def _initial_frame(x, batch, size, k, seed, tangents, looped_map):
    if tangents is not None:
        Y = tangents.to(device=x.device, dtype=x.dtype).reshape(k, batch, size).permute(1, 2, 0)
    else:
        # Drawn in float64 whatever the compute dtype, so float32 and float64 runs start from the same frame.
        generator = torch.Generator(device=x.device).manual_seed(seed)
        Y = torch.randn(batch, size, k, generator=generator, dtype=torch.float64, device=x.device).to(x.dtype)
    frame, _ = orthonormalize_frame(Y.permute(2, 0, 1).reshape(k, *x.shape), batch)
    return frame


def _qr_method(looped_map, x, steps, k, transient, reorth_every, seed, tangents, chunk_size, meta, compile, owner):
    batch_shape = looped_map.batch_shape(x)
    batch = int(torch.Size(batch_shape).numel())
    size = looped_map.state_size(x)
    frame = _initial_frame(x, batch, size, k, seed, tangents, looped_map)  # [k, *batch, *state], orthonormal
    total = transient + steps
    dense = dense_pays(looped_map, x, frame, size, compile)
    if dense:  # a tiny state: the orbit, then every Jacobian of a stretch at once (`_dense_tangent`)
        rows, path = dense_qr_rows(looped_map, x, frame, total, transient, reorth_every), None
    else:
        if chunk_size is None:  # all k tangents in one call where they fit in memory, else as many as fit
            from ..linalg.operators import _fitting_chunk

            chunk_size = _fitting_chunk(looped_map, x, k)
        run_loop = LoopRunner(looped_map, owner, batch=batch, chunk_size=chunk_size, compile=compile,
                              total_loops=total)
        rows, path = _jvp_rows(run_loop, x, frame, total, transient, reorth_every), run_loop
    nonfinite_step = torch.full((batch,), -1, dtype=torch.long, device=x.device)
    alive = torch.ones(batch, dtype=torch.bool, device=x.device)
    local_rows, record_steps = [], []
    last_qr = transient
    window: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (loop, log|diag R|, state finite) since last check
    with torch.no_grad():
        for t, x, frame, log_r, state_ok in rows:
            if log_r is None:
                continue
            window.append((t, log_r, state_ok))
            if t > transient:
                width = t - last_qr
                local_rows.append(log_r if width == 1 else log_r / width)
                record_steps.append(t - transient)
                last_qr = t
            if len(window) >= _CHECK_EVERY or t == total or t == transient:
                alive = _check_window(window, alive, nonfinite_step)
                window = []
                if not bool(alive.any()):
                    break
    if bool((nonfinite_step >= 0).any()):
        first = int(nonfinite_step[nonfinite_step >= 0].min())
        warnings.warn(
            f"lyapunov_spectrum: {int((nonfinite_step >= 0).sum())} of {batch} trajectories of '{looped_map.name}' "
            f"became NaN/Inf (first at loop {first}); their exponents are NaN (see result.nonfinite_step). Try "
            "dtype=torch.float64, a smaller step size, or a normalized map.",
            NonFiniteWarning,
            stacklevel=3,
        )
    meta = {**meta, "tangent_path": "dense" if dense else path.path}
    Q = frame if dense else frame.reshape(k, batch, size).permute(1, 2, 0)
    end = _EndOfRun(x, Q, size)
    return _assemble(looped_map, end, local_rows, record_steps, nonfinite_step, alive, batch_shape, k, meta, "qr")


def _jvp_rows(run_loop, x, frame, total, transient, reorth_every):
    """The jvp loop as rows ``(t, x_t, frame_t, log|diag R| or None, state finite or None)``."""
    for t in range(1, total + 1):
        if t % reorth_every != 0 and t != total and t != transient:
            x, frame = run_loop(x, frame, renormalize=False)
            yield t, x, frame, None, None
            continue
        # A NaN/Inf trajectory does not break the batched QR (LAPACK propagates NaN), so finiteness is checked
        # every few renormalizations: a host sync per loop would cost more than the loop itself.
        x, frame, log_r, state_ok = run_loop(x, frame, renormalize=True)
        yield t, x, frame, log_r, state_ok


class _EndOfRun:
    """The state and frame after a run, in the shape `_assemble` reads: ``x``, ``Q [batch, D, k]``, ``size``."""

    def __init__(self, x, Q, size):
        self.x = x
        self.Q = Q
        self.size = size


_CHECK_EVERY = 16


def _check_window(window, alive, nonfinite_step):
    """Mark trajectories whose state or log|R| went non-finite; record the first such loop."""
    logs = torch.stack([log_r for _, log_r, _ in window])  # [w, batch, k]
    states_ok = torch.stack([ok for _, _, ok in window])  # [w, batch]
    # log|R_ii| = -inf is a tangent the Jacobian annihilated exactly (an exponent of -inf, not a blow-up)
    bad = (torch.isnan(logs) | (logs == math.inf)).any(-1) | ~states_ok  # [w, batch]
    steps = torch.tensor([t for t, _, _ in window], device=logs.device)
    newly = alive & bad.any(0)
    if bool(newly.any()):
        first = torch.argmax(bad.to(torch.int8), dim=0)  # first bad row per trajectory
        nonfinite_step.copy_(torch.where(newly, steps[first], nonfinite_step))
        alive = alive & ~newly
    return alive


def _assemble(looped_map, frame, local_rows, record_steps, nonfinite_step, alive, batch_shape, k, meta, method):
    dtype = frame.x.dtype
    device = frame.x.device
    batch = nonfinite_step.shape[0]
    if local_rows:
        local = torch.stack(local_rows)  # [n, batch, k]
        widths = torch.diff(torch.tensor([0] + record_steps, dtype=dtype, device=device))
        weighted = torch.cumsum(local * widths.view(-1, 1, 1), dim=0)
        history = weighted / torch.tensor(record_steps, dtype=dtype, device=device).view(-1, 1, 1)
        exponents = history[-1].clone()
    else:
        local = torch.zeros(0, batch, k, dtype=dtype, device=device)
        history = local.clone()
        exponents = torch.full((batch, k), float("nan"), dtype=dtype, device=device)
    dead = nonfinite_step >= 0
    exponents[dead] = float("nan")
    # Columns come out of QR nearly sorted; sort by the final estimate and carry the history along.
    order = torch.argsort(torch.nan_to_num(exponents, nan=-math.inf), dim=1, descending=True)
    exponents = torch.gather(exponents, 1, order)
    if history.shape[0]:
        history = torch.gather(history, 2, order.unsqueeze(0).expand_as(history))
        local = torch.gather(local, 2, order.unsqueeze(0).expand_as(local))
    stderr = _batch_means_stderr(local)
    # an exponent of -inf is exact (the product of Jacobians lost rank), not a noisy average: no spread
    stderr[exponents == -math.inf] = 0.0
    stderr[dead] = float("nan")
    kaplan_yorke = kaplan_yorke_dimension(exponents, state_size=frame.size)
    tangents = None
    if frame.Q is not None:
        Q = torch.gather(frame.Q, 2, order.unsqueeze(1).expand_as(frame.Q))
        tangents = Q.permute(2, 0, 1).reshape(k, *frame.x.shape)
    return LyapunovResult(
        exponents=exponents.reshape(*batch_shape, k),
        history=history.reshape(-1, *batch_shape, k),
        history_steps=torch.tensor(record_steps, dtype=torch.long),
        finite_time=local.reshape(-1, *batch_shape, k),
        stderr=stderr.reshape(*batch_shape, k),
        kaplan_yorke=kaplan_yorke.reshape(batch_shape),
        final_state=frame.x,
        final_tangents=tangents,
        nonfinite_step=nonfinite_step.reshape(batch_shape),
        method=method,
        meta=meta,
    )


def _batch_means_stderr(local: torch.Tensor, blocks: int = 10) -> torch.Tensor:
    """Standard error of the mean of a correlated series ``[n, batch, k]`` by non-overlapping batch means."""
    n = local.shape[0]
    if n < 2:
        return torch.full(local.shape[1:], float("nan"), dtype=local.dtype, device=local.device)
    blocks = min(blocks, n)
    length = n // blocks
    means = local[: blocks * length].reshape(blocks, length, *local.shape[1:]).mean(1)
    return means.std(0, unbiased=True) / math.sqrt(blocks)


def kaplan_yorke_dimension(exponents: torch.Tensor, state_size: int | None = None) -> torch.Tensor:
    """The Kaplan–Yorke (Lyapunov) dimension ``j + (l_1 + ... + l_j) / |l_{j+1}|`` from sorted exponents.

    Example::

        >>> import torch, jacobiscope
        >>> float(jacobiscope.kaplan_yorke_dimension(torch.tensor([0.41922, -1.62319])))  # Hénon
        1.258...

    ``j`` is the largest index with a non-negative partial sum. Returns 0 when the largest exponent is negative;
    ``state_size`` when all ``D`` exponents sum to ``>= 0``; NaN when fewer than ``D`` exponents were computed
    and they still sum to ``>= 0`` (the dimension is at least ``k``: compute more exponents).
    """
    if not isinstance(exponents, torch.Tensor):
        try:
            exponents = torch.as_tensor(exponents, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as error:
            raise ArgumentError(f"exponents must be numbers [..., k], got {type(exponents).__name__} — pass e.g. "
                                "result.exponents.") from error
    if exponents.dim() == 0 or exponents.shape[-1] == 0:
        # No exponent, no dimension: an empty input gave a silent NaN.
        raise ArgumentError(f"kaplan_yorke_dimension needs at least one exponent [..., k >= 1], got shape "
                            f"{tuple(exponents.shape)} — pass e.g. result.exponents.")
    if exponents.is_complex() or exponents.dtype == torch.bool:
        raise ArgumentError(f"exponents must be real, got {exponents.dtype} — pass e.g. result.exponents.")
    if not exponents.is_floating_point():
        exponents = exponents.to(torch.float64)
    k = exponents.shape[-1]
    partial = torch.cumsum(exponents, dim=-1)
    nonnegative = partial >= 0
    j = nonnegative.sum(-1)  # partial sums of sorted exponents are >= 0 up to j, then negative
    result = torch.zeros(exponents.shape[:-1], dtype=exponents.dtype, device=exponents.device)
    inside = (j > 0) & (j < k)
    if bool(inside.any()):
        index = (j - 1).clamp(min=0).unsqueeze(-1)
        partial_j = torch.gather(partial, -1, index).squeeze(-1)
        next_exponent = torch.gather(exponents, -1, j.clamp(max=k - 1).unsqueeze(-1)).squeeze(-1)
        result = torch.where(inside, j.to(exponents.dtype) + partial_j / next_exponent.abs(), result)
    full = j == k
    fill = float(state_size) if state_size is not None and state_size == k else float("nan")
    result = torch.where(full, torch.full_like(result, fill), result)
    return torch.where(torch.isnan(exponents).any(-1), torch.full_like(result, float("nan")), result)


def _two_trajectory(looped_map, x, steps, transient, perturbation, seed, meta):
    """Benettin's two-trajectory estimate of the largest exponent (no derivatives at all)."""
    batch_shape = looped_map.batch_shape(x)
    batch = int(torch.Size(batch_shape).numel())
    size = looped_map.state_size(x)
    with torch.no_grad():
        for _ in range(transient):
            x = looped_map.step(x)
        if perturbation is None:
            scale = max(1.0, float(x.reshape(batch, -1).norm(dim=1).max()))
            perturbation = math.sqrt(torch.finfo(x.dtype).eps) * scale
        generator = torch.Generator(device=x.device).manual_seed(seed)
        direction = torch.randn(batch, size, generator=generator, dtype=x.dtype, device=x.device)
        direction = direction / direction.norm(dim=1, keepdim=True)
        y = x + perturbation * direction.reshape(x.shape)
        nonfinite_step = torch.full((batch,), -1, dtype=torch.long, device=x.device)
        local_rows, record_steps = [], []
        for t in range(1, steps + 1):
            x = looped_map.step(x)
            y = looped_map.step(y)
            difference = (y - x).reshape(batch, size)
            distance = difference.norm(dim=1)
            finite = torch.isfinite(distance)
            # the two trajectories met exactly (a constant map, or a contraction past the float resolution in one
            # step): the separation's log is -inf, and the perturbation starts again along the first direction
            met = finite & (distance == 0)
            bad = ~finite & (nonfinite_step < 0)
            if bool(bad.any()):
                nonfinite_step = torch.where(bad, torch.full_like(nonfinite_step, t + transient), nonfinite_step)
            growth = (distance / perturbation).log()
            if bool((bad | met).any()):
                restart = ~finite | met
                distance = torch.where(restart, torch.full_like(distance, perturbation), distance)
                difference = torch.where(restart.unsqueeze(1), perturbation * direction, difference)
            growth = torch.where(nonfinite_step >= 0, torch.full_like(growth, float("nan")), growth)
            local_rows.append(growth.unsqueeze(1))
            record_steps.append(t)
            y = x + (perturbation * difference / distance.unsqueeze(1)).reshape(x.shape)
    frame = _EndOfRun(x, None, size)
    return _assemble(
        looped_map, frame, local_rows, record_steps, nonfinite_step, nonfinite_step < 0, batch_shape, 1,
        {**meta, "perturbation": perturbation}, "two_trajectory",
    )
