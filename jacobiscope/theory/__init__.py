"""Theory modules: solvable reductions that measurements of looped attention models can be checked against.

- `jacobiscope.theory.tokens` (theory spec Part A): token dynamics of linear / unnormalized-softmax attention as
  particles on the sphere; the d = 2 Kuramoto–Daido phase form and Ott–Antonsen equation; regime classification
  (``"clustering"``, ``"rotating_clusters"``, ``"oscillation"``, ``"interior_fixed_point"``).
- `jacobiscope.theory.aim` (theory spec Part B): the attention-indexed teacher–student model: online SGD,
  population losses, gradient-flow ODEs and the truncated moment hierarchy.
"""
from . import aim, tokens
from .tokens import TOKEN_REGIMES, TokenRegime, TokenSimulation, classify_regime, simulate

__all__ = ["aim", "tokens", "TOKEN_REGIMES", "TokenRegime", "TokenSimulation", "classify_regime", "simulate"]
