"""Naming the long-time regime of a simulated token system from its order parameters (`classify_regime`, spec A.4)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ..errors import ArgumentError
from ._tokens_checks import _check_real, _check_z0, _matrices
from ._tokens_particles import simulate
from ._tokens_phase import integrate_oa
from .._validation import one_of

TOKEN_REGIMES = ("clustering", "rotating_clusters", "oscillation", "interior_fixed_point")


@dataclass
class TokenRegime:
    """What `classify_regime` returns.

    Attributes:
        regime: one of ``TOKEN_REGIMES``; a batch gives a nested list of names.
        evidence: plain numbers (lists for a batch): ``order_limit`` (late mean of ``|R_2|``, or of the
            nematic / polar order for particles), ``order_min`` / ``order_std`` over the late window,
            ``arg_drift`` (late mean angular speed of ``arg R_2`` / of the axis), ``period`` (rotation or oscillation period; 0 if none),
            ``fixed_point`` (final ``R_2`` as ``[re, im]``, ``d = 2`` only), ``method``, ``reason``.
        trajectory: the ``R_2`` series (OA) or the `TokenSimulation` (particles).
    """

    regime: object
    evidence: dict = field(default_factory=dict)
    trajectory: object = None


def classify_regime(A, V, *, beta: float = 1.0, attention: str = "linear", z0=0.3 + 0.1j, horizon: float = 400.0,
                    dt: float = 0.02, window: float = 0.25, radius_tol: float = 1e-2, drift_tol: float = 1e-3,
                    oscillation_tol: float = 1e-3,
                    n: int = 64, seed: int = 0, method: str | None = None) -> TokenRegime:
    """Name the long-time regime of the token dynamics: clustering, rotating clusters, oscillation, interior point.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.tokens import classify_regime
        >>> r = classify_regime(torch.eye(2), torch.tensor([[1.1, -0.5], [0.5, 0.9]]), horizon=60, dt=0.02)
        >>> r.regime, round(r.evidence["period"], 3)           # Type 2, predicted period 6.41275
        ('rotating_clusters', 6.413)

    Arguments:
        A, V: ``[..., d, d]``; a leading batch is classified element-wise (one integration).
        beta, attention: the dynamics.
        z0: initial ``R_2`` (complex, or a complex tensor broadcasting with the batch) for the OA method.
        horizon, dt: integration time and RK4 step. The verdict uses the last ``window`` fraction.
        radius_tol: clustered when the late ``|R_2|`` (or ``2 lambda_1 - 1``) stays above ``1 - radius_tol``;
            the slow algebraic approach at degenerate points (e.g. ``V = diag(0, -1)``: 0.995 at t = 400) needs it.
        drift_tol: a clustered state rotates when its late angular speed exceeds this (rad per unit time).
        oscillation_tol: an unclustered state oscillates when the late standard deviation of the order
            parameter exceeds this (a slow spiral into an interior point must have settled below it).
        n, seed: tokens and initial seed of the particle method.
        method: ``"oa"`` (default for LSA in ``d = 2``: exact ``n -> infinity`` reduction) or ``"particles"``
            (default otherwise: RK4 particles; order parameter the nematic order ``(d lambda_1 - 1)/(d - 1)`` for
            linear attention (``= |R_2|`` in ``d = 2``), the polar order for softmax; leading-axis rotation).

    Returns:
        `TokenRegime`. Rules on the late window: ``order_min > 1 - radius_tol`` is clustered: rotating when
        ``|arg drift| > drift_tol`` (period ``2 pi / |drift|`` of ``arg R_2``, measured between its first and last
        crossing of a multiple of ``2 pi``), else ``"clustering"``; otherwise ``order_std > oscillation_tol``
        is ``"oscillation"`` (period from upward crossings of the mean), else
        ``"interior_fixed_point"``.

    References: theory spec A.4 (regime definitions, verified examples), A.5 (high-d order parameters).
    """
    d = (A.shape[-1] if isinstance(A, torch.Tensor) else len(A))
    method = _classification_method(method, d, attention)
    beta = _check_real(beta, "beta")
    horizon, dt = _check_real(horizon, "horizon", positive=True, example="400"), _check_real(dt, "dt", positive=True,
                                                                                              example="0.02")
    window = _check_real(window, "window", positive=True, example="0.25")
    if window > 1:
        raise ArgumentError(f"window is the late fraction of the run the verdict reads, in (0, 1], got {window!r} — "
                            "pass e.g. window=0.25")
    steps = int(round(horizon / dt))
    if steps * window < 20:  # a verdict read from a handful of steps named a regime it never saw
        raise ArgumentError(f"horizon={horizon:g} at dt={dt:g} is {steps} steps, and the verdict reads the last "
                            f"{window:.0%} of them ({int(steps * window)}): too few to tell a regime — pass horizon >= "
                            f"{math.ceil(20 / window) * dt:g} (the default 400 settles the spec's examples)")
    if method == "oa":
        _check_z0(z0)
    A, V = _matrices(A, V, d, torch.float64)
    if method == "oa":
        run = _oa_series(A, V, beta, z0, steps, dt)
    else:
        run = _particle_series(A, V, n, d, steps, dt, attention, beta, seed)
    late = _late_window(run, window)
    flat = lambda x: x.reshape(-1).tolist()  # noqa: E731
    names, periods = [], []
    for i, (low, std, w) in enumerate(zip(flat(late.r_min), flat(late.r_std), flat(late.drift))):
        name = _regime_rule(low, std, w, radius_tol, drift_tol, oscillation_tol)
        names.append(name)
        periods.append(_regime_period(name, late, i, w))
    shape = late.r_mean.shape
    regime = names[0] if len(shape) == 0 else _nest(names, shape)
    evidence = {
        "method": method,
        "order_limit": late.r_mean.tolist(), "order_min": late.r_min.tolist(), "order_std": late.r_std.tolist(),
        "arg_drift": late.drift.tolist(), "period": periods[0] if len(shape) == 0 else _nest(periods, shape),
        "horizon": float(horizon), "dt": float(dt),
    }
    if method == "oa":
        last = run.series[-1]
        evidence["fixed_point"] = torch.stack([last.real, last.imag], -1).tolist()
    evidence["reason"] = (f"late |R_2| (or nematic/polar order) min {late.r_min.min().item():.4g}, arg drift "
                          f"{late.drift.abs().max().item():.3g} rad/time over the last {window:.0%} of t = {horizon:g}")
    return TokenRegime(regime, evidence, run.series)


class _Series(NamedTuple):
    """The order-parameter series a verdict is read from: ``radius`` and unwrapped ``phase`` ``[T, *batch]``, the
    trajectory handed back to the caller, the recording step and the phase of one full turn."""

    radius: torch.Tensor
    phase: torch.Tensor
    series: object
    record_dt: float
    full_turn: float


class _LateWindow(NamedTuple):
    """The last ``window`` fraction of a `_Series` and its summary statistics (each ``[*batch]``)."""

    r: torch.Tensor
    phase: torch.Tensor
    drift: torch.Tensor
    r_mean: torch.Tensor
    r_min: torch.Tensor
    r_std: torch.Tensor
    record_dt: float
    full_turn: float


def _classification_method(method, d, attention):
    if method is None:
        method = "oa" if (d == 2 and attention == "linear") else "particles"
    one_of(method, "method", ("oa", "particles"))
    if method == "oa" and (d != 2 or attention != "linear"):
        raise ArgumentError("method='oa' is exact only for linear attention in d = 2 (softmax attention has odd "
                            "harmonics and no OA reduction); use method='particles'.")
    return method


def _oa_series(A, V, beta, z0, steps, dt):
    Z = integrate_oa(torch.as_tensor(z0, dtype=torch.complex128, device=A.device), A, V, steps, dt, beta)
    return _Series(Z.abs(), _unwrap(torch.angle(Z)), Z, dt, 2 * math.pi)


def _particle_series(A, V, n, d, steps, dt, attention, beta, seed):
    sim = simulate(A, V, n, d, steps, dt, attention, beta, seed)
    # nematic order (d lambda_1 - 1)/(d - 1) is |R_2| in d = 2 and runs from 0 (isotropic) to 1 (one axis).
    radius = sim.order.nematic_order if attention == "linear" else sim.order.polar_order
    # An axis returns after pi (LSA, sign-blind), a signed cluster after 2 pi.
    phase = torch.cumsum(torch.cat([torch.zeros_like(sim.axis_speed[:1]), sim.axis_speed * dt]), 0)
    return _Series(radius, phase, sim, dt, (math.pi if attention == "linear" else 2 * math.pi))


def _late_window(run, window):
    start = int(run.radius.shape[0] * (1 - window))
    late_r = run.radius[start:]
    late_phase = run.phase[start:]
    t_late = torch.arange(late_r.shape[0], dtype=torch.float64, device=late_r.device) * run.record_dt
    drift = (late_phase[-1] - late_phase[0]) / (t_late[-1] - t_late[0])
    return _LateWindow(late_r, late_phase, drift, late_r.mean(0), late_r.amin(0), late_r.std(0), run.record_dt,
                       run.full_turn)


def _regime_rule(low, std, drift, radius_tol, drift_tol, oscillation_tol):
    """The verdict of one system from its late order-parameter minimum, spread and angular drift."""
    if low > 1 - radius_tol:
        return "rotating_clusters" if abs(drift) > drift_tol else "clustering"
    return "oscillation" if std > oscillation_tol else "interior_fixed_point"


def _regime_period(name, late, i, drift):
    """Period of the ``i``-th system of the (flattened) batch: of ``arg R_2`` when rotating, of the order parameter
    when oscillating, else 0."""
    def column(s):
        return s.reshape(s.shape[0], -1)[:, i]

    if name == "rotating_clusters":
        return _crossing_period(column(late.phase) * (1 if drift > 0 else -1), late.full_turn, late.record_dt,
                                fallback=late.full_turn / abs(drift))
    if name == "oscillation":
        r = column(late.r)
        return _crossing_period(r - r.mean(), None, late.record_dt, fallback=0.0)
    return 0.0


def _crossing_period(signal, level_step, dt, fallback):
    """Mean time between successive upward crossings of ``signal`` through 0 (``level_step=None``) or through
    consecutive multiples of ``level_step`` (a monotone unwrapped phase), linearly interpolated."""
    s = signal.to(torch.float64)
    if level_step is not None:
        s = s / level_step
        k = torch.floor(s)
        idx = torch.nonzero(k[1:] > k[:-1]).flatten()
        levels = k[1:][idx]
    else:
        idx = torch.nonzero((s[:-1] < 0) & (s[1:] >= 0)).flatten()
        levels = torch.zeros_like(idx, dtype=s.dtype)
    if idx.numel() < 2:
        return float(fallback)
    frac = (levels - s[idx]) / (s[idx + 1] - s[idx])
    times = (idx.to(s.dtype) + frac) * dt
    return float((times[-1] - times[0]) / (idx.numel() - 1))


def _unwrap(phase):
    diff = phase[1:] - phase[:-1]
    diff = torch.remainder(diff + math.pi, 2 * math.pi) - math.pi
    return torch.cat([phase[:1], phase[:1] + torch.cumsum(diff, 0)])


def _nest(values, shape):
    if len(shape) == 1:
        return list(values)
    size = len(values) // shape[0]
    return [_nest(values[i * size:(i + 1) * size], shape[1:]) for i in range(shape[0])]
