"""Token dynamics of deep linear / unnormalized-softmax attention as particles on the sphere (theory spec, Part A).

Tokens ``x_1..x_n`` on ``S^{d-1}`` move by

    dx_k/dt = P_perp(x_k) (1/n) sum_j h(<x_k, A x_j>) V x_j,     P_perp(x) = I - x x^T,

with ``h(y) = beta y`` (linear self-attention, LSA) or ``h(y) = exp(beta y)`` (unnormalized softmax attention,
USA); ``A`` plays ``Q^T K`` and ``V`` the value matrix. This module integrates the particles (RK4 with
renormalization, or projected Euler for comparison), and in ``d = 2`` for LSA ships the exact reductions:
the Kuramoto–Daido phase equation with pure second-harmonic coupling, and the Ott–Antonsen (OA) equation for
``R_2 = (1/n) sum_j exp(2 i theta_j)``. `classify_regime` names the long-time behaviour: ``"clustering"``,
``"rotating_clusters"``, ``"oscillation"`` or ``"interior_fixed_point"``; `predict_regime` gives the regime the
spec's exact statements predict without simulating, and `regime_table` sets the two side by side for the spec's
verified examples.

Order parameters come from `jacobiscope.dynamics.clusters` (``2 lambda_1 - 1 = |R_2|`` in ``d = 2``).
Everything is batched over leading dimensions of ``A`` / ``V`` and runs on their device.
"""
from __future__ import annotations

from ._tokens_classify import TOKEN_REGIMES, TokenRegime, classify_regime
from ._tokens_classify import _crossing_period  # noqa: F401 - private, used by the tests
from ._tokens_particles import TokenSimulation, attention_field, integrate_tokens, simulate, tangent_field
from ._tokens_phase import (
    complex_coefficients,
    hamiltonian_energy,
    integrate_oa,
    kuramoto_order,
    oa_rhs,
    phase_velocity,
    wrapped_cauchy_phases,
)
from ._tokens_phase import _omega_kappa  # noqa: F401 - private, used by the tests
from ._tokens_predict import circle_velocity, predict_regime, transverse_exponent
from ._tokens_table import REGIME_EXAMPLES, REGIME_TABLE, regime_table, regime_trajectories

__all__ = [
    "TOKEN_REGIMES",
    "TokenSimulation",
    "TokenRegime",
    "attention_field",
    "tangent_field",
    "integrate_tokens",
    "simulate",
    "complex_coefficients",
    "phase_velocity",
    "kuramoto_order",
    "oa_rhs",
    "integrate_oa",
    "wrapped_cauchy_phases",
    "hamiltonian_energy",
    "classify_regime",
    "circle_velocity",
    "transverse_exponent",
    "predict_regime",
    "REGIME_EXAMPLES",
    "REGIME_TABLE",
    "regime_table",
    "regime_trajectories",
]
