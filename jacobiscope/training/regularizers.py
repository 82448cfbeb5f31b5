"""Regularizers on what a looped model's dynamics depend on: weight spectra, the Jacobian of the loop, and the
energy-admitting structure of attention.

- `SpectralRegularizer` / `spectral_penalty`: ``R_spec = sum_W (sigma_max(W)^2 - 1)^2 + sum_b ||b||_2^4`` over the
  linear maps of the looped blocks (fused QKV projections split into W_Q, W_K, W_V), with ``sigma_max`` from a
  persistent power iteration (one iteration per call, vectors kept between calls) or exactly.
- `jacobian_spectral_penalty` / `JacobianRegularizer`: ``(||dF/dX||_2 - target)^2`` at sampled states of the
  looped map, by power iteration on ``J^T J`` (jvp / vjp) and one differentiable jvp, so gradients reach the weights.
- `energy_penalty`: distance of the attention weights from the E-single / E-multi energy-admitting constraints.

All penalties are plain differentiable scalars: add them to a loss, or let `SpectralRegTrainer` do it.
"""
from __future__ import annotations

# The code lives in private modules, one job each; this module is the public place to import it from.
from ._energy import AttentionWeights, attention_weights, energy_penalty
from ._jacobian import JacobianPenalty, JacobianRegularizer, jacobian_spectral_penalty
from ._model_parts import DEFAULT_FUSED  # noqa: F401 - public constant, not in __all__
from ._spectral import STATE_FORMAT  # noqa: F401 - public constant, not in __all__
from ._spectral import SpectralPenalty, SpectralRegularizer, spectral_penalty
from ._targets import LinearTarget, spectral_targets

__all__ = [
    "LinearTarget",
    "SpectralPenalty",
    "SpectralRegularizer",
    "spectral_penalty",
    "spectral_targets",
    "JacobianPenalty",
    "JacobianRegularizer",
    "jacobian_spectral_penalty",
    "AttentionWeights",
    "attention_weights",
    "energy_penalty",
]
