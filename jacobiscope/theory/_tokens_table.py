"""The spec's verified ``d = 2`` examples: predicted against found regimes and the phase-portrait trajectories (A.4)."""
from __future__ import annotations

import torch

from ..errors import ArgumentError
from ._tokens_checks import _check_int, _matrices
from ._tokens_classify import classify_regime
from ._tokens_particles import simulate
from ._tokens_phase import integrate_oa, kuramoto_order, wrapped_cauchy_phases
from ._tokens_predict import predict_regime


# The spec's verified examples (A.4), beta = 1: (label, A, V, regime the spec reports). Predictions come from
# `predict_regime`; the reported regime is what the spec's long runs found.
REGIME_TABLE = (
    ("V=I, A=diag(1, 0.5) (tr>0)", [[1.0, 0.0], [0.0, 0.5]], [[1.0, 0.0], [0.0, 1.0]], "clustering"),
    ("V=I, A=diag(1, -2) (det<0)", [[1.0, 0.0], [0.0, -2.0]], [[1.0, 0.0], [0.0, 1.0]], "clustering"),
    ("V=I, A=[[1,-2],[2,-1]] (tr=0)", [[1.0, -2.0], [2.0, -1.0]], [[1.0, 0.0], [0.0, 1.0]], "clustering"),
    ("V=I, A=diag(-1, -2)", [[-1.0, 0.0], [0.0, -2.0]], [[1.0, 0.0], [0.0, 1.0]], "interior_fixed_point"),
    ("V=I, A=-I+0.5J", [[-1.0, -0.5], [0.5, -1.0]], [[1.0, 0.0], [0.0, 1.0]], "interior_fixed_point"),
    ("V=I, A=[[0.5,-2],[2,-1]]", [[0.5, -2.0], [2.0, -1.0]], [[1.0, 0.0], [0.0, 1.0]], "interior_fixed_point"),
    ("A=I, V=diag(1, -2)", [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, -2.0]], "clustering"),
    ("A=I, V=diag(-0.5, -1)", [[1.0, 0.0], [0.0, 1.0]], [[-0.5, 0.0], [0.0, -1.0]], "interior_fixed_point"),
    ("A=I, V=-I", [[1.0, 0.0], [0.0, 1.0]], [[-1.0, 0.0], [0.0, -1.0]], "interior_fixed_point"),
    ("A=I, V=diag(0, -1)", [[1.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [0.0, -1.0]], "clustering"),
    ("A=I, V=[[1.1,-.5],[.5,.9]]", [[1.0, 0.0], [0.0, 1.0]], [[1.1, -0.5], [0.5, 0.9]], "rotating_clusters"),
    ("A=I, V=[[1.5,-.3],[.3,.5]]", [[1.0, 0.0], [0.0, 1.0]], [[1.5, -0.3], [0.3, 0.5]], "clustering"),
    ("A=diag(2,1), V=.5I+J", [[2.0, 0.0], [0.0, 1.0]], [[0.5, -1.0], [1.0, 0.5]], "rotating_clusters"),
    ("A=I, V=[[.5,1],[-1,-.5]]", [[1.0, 0.0], [0.0, 1.0]], [[0.5, 1.0], [-1.0, -0.5]], "oscillation"),
    ("A=I, V=[[1,.5],[-.5,-1]]", [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.5], [-0.5, -1.0]], "clustering"),
)

# One representative (A, V) per regime, from the table above: what the phase portraits show.
REGIME_EXAMPLES = {
    "clustering": ([[1.0, 0.0], [0.0, 0.5]], [[1.0, 0.0], [0.0, 1.0]]),
    "rotating_clusters": ([[1.0, 0.0], [0.0, 1.0]], [[1.1, -0.5], [0.5, 0.9]]),
    "oscillation": ([[1.0, 0.0], [0.0, 1.0]], [[0.5, 1.0], [-1.0, -0.5]]),
    "interior_fixed_point": ([[-1.0, 0.0], [0.0, -2.0]], [[1.0, 0.0], [0.0, 1.0]]),
}


def regime_table(rows=REGIME_TABLE, *, beta: float = 1.0, z0=0.3 + 0.1j, horizon: float = 400.0,
                 dt: float = 0.05) -> list:
    """Predicted (`predict_regime`) against found (`classify_regime`, one batched OA run) for each ``(A, V)``.

    Example::

        >>> from jacobiscope.theory.tokens import REGIME_TABLE, regime_table
        >>> rows = regime_table(REGIME_TABLE[10:11], horizon=60.0)
        >>> r = rows[0]
        >>> r["predicted"], r["found"], round(r["found_period"], 3), round(r["predicted_period"], 5)
        ('rotating_clusters', 'rotating_clusters', 6.413, 6.41275)

    Arguments:
        rows: ``(label, A, V, reported)`` tuples (default: the spec's verified examples, `REGIME_TABLE`).
        beta, z0, horizon, dt: as `classify_regime` (the spec: ``z0 = 0.3 + 0.1i``, ``T = 400``).

    Returns:
        One dict per row: ``label``, ``reported`` (the spec's long-run result), ``predicted`` and ``rule``, ``found``,
        ``agree`` (``predicted == found``), ``predicted_fixed_point`` / ``found_fixed_point`` (complex or None),
        ``predicted_period`` / ``found_period``, ``order_limit``, ``order_std``, ``arg_drift``.

    References: theory spec A.4.
    """
    rows = list(rows)
    if not rows:
        raise ArgumentError("regime_table needs at least one (label, A, V, reported) row.")
    A = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    V = torch.tensor([r[2] for r in rows], dtype=torch.float64)
    found = classify_regime(A, V, beta=beta, z0=z0, horizon=horizon, dt=dt)
    out = []
    for i, (label, a, v, reported) in enumerate(rows):
        pred = predict_regime(a, v, beta=beta, z0=z0)
        fp = pred.evidence["fixed_point"]
        out.append({
            "label": label, "reported": reported,
            "predicted": pred.regime, "rule": pred.evidence["rule"], "found": found.regime[i],
            "agree": pred.regime == found.regime[i],
            "predicted_fixed_point": complex(*fp) if fp is not None else None,
            "found_fixed_point": complex(*found.evidence["fixed_point"][i]),
            "predicted_period": pred.evidence["period"], "found_period": found.evidence["period"][i],
            "order_limit": found.evidence["order_limit"][i], "order_std": found.evidence["order_std"][i],
            "arg_drift": found.evidence["arg_drift"][i],
        })
    return out


def regime_trajectories(examples=None, *, n: int = 64, horizon: float = 30.0, dt: float = 0.02,
                        z0=0.3 + 0.1j, beta: float = 1.0, record_every: int = 5) -> dict:
    """Particle and OA trajectories of one ``(A, V)`` per regime in ``d = 2`` (the data of the phase portraits).

    Example::

        >>> from jacobiscope.theory.tokens import regime_trajectories
        >>> data = regime_trajectories(n=16, horizon=4.0, dt=0.05, record_every=2)
        >>> list(data), tuple(data["oscillation"]["theta"].shape)
        (['clustering', 'rotating_clusters', 'oscillation', 'interior_fixed_point'], (41, 16))

    Arguments:
        examples: ``{name: (A, V)}`` (default `REGIME_EXAMPLES`).
        n: tokens; their doubled angles start splay-sampled from the wrapped-Cauchy law centred at ``z0``, so the
            particles' ``R_2`` follows the OA solution from ``z0`` (exactly up to ``(1-|z0|^2)|z0|^{n-1}``).
        horizon, dt, record_every: RK4 integration of both (one batched run each).
        beta: inverse temperature.

    Returns:
        ``{name: {"A", "V", "times" [K], "R2" [K] (particles, complex), "Z" [K] (OA, complex), "theta" [K, n]
        (token angles, ``atan2`` of the states), "states" [K, n, 2]}}``.

    References: theory spec A.2-A.4.
    """
    examples = dict(REGIME_EXAMPLES if examples is None else examples)
    if not examples:
        raise ArgumentError("examples must name at least one (A, V) pair.")
    _check_int(n, "n", 1)
    _check_int(record_every, "record_every", 1)
    steps = max(int(round(horizon / dt)), 1)
    steps += (-steps) % record_every
    A = torch.stack([_matrices(a, v, 2, torch.float64)[0] for a, v in examples.values()])
    V = torch.stack([_matrices(a, v, 2, torch.float64)[1] for a, v in examples.values()])
    theta0 = wrapped_cauchy_phases(z0, n, splay=True)
    x0 = torch.stack([theta0.cos(), theta0.sin()], -1).expand(len(examples), n, 2)
    sim = simulate(A, V, n, 2, steps, dt, "linear", beta, x0=x0, record_every=record_every)
    Z = integrate_oa(kuramoto_order(x0[0]), A, V, steps, dt, beta, record_every=record_every)
    out = {}
    for i, name in enumerate(examples):
        states = sim.states[:, i]
        out[name] = {"A": A[i], "V": V[i], "times": sim.times, "R2": sim.R2[:, i], "Z": Z[:, i],
                     "theta": torch.atan2(states[..., 1], states[..., 0]), "states": states}
    return out
