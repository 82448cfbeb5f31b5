"""Training looped models with what jacobiscope measures: spectral, Jacobian and energy regularizers, a
`transformers.Trainer` that applies them correctly (gradient accumulation, several processes, resume), and
callbacks that monitor the Lyapunov exponent and the pseudo-energy.

Example::

    >>> import torch
    >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
    >>> from jacobiscope.training import spectral_penalty
    >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
    >>> spectral_penalty(model).item() > 0          # (sigma_max(W)^2 - 1)^2 summed over the looped Linear layers
    True

The trainer and callbacks import ``transformers.Trainer`` on first use (``from jacobiscope.training import
SpectralRegTrainer``), so importing the regularizers stays light.
"""
from .regularizers import (
    AttentionWeights,
    JacobianPenalty,
    JacobianRegularizer,
    LinearTarget,
    SpectralPenalty,
    SpectralRegularizer,
    attention_weights,
    energy_penalty,
    jacobian_spectral_penalty,
    spectral_penalty,
    spectral_targets,
)

_LAZY = {
    "SpectralRegTrainer": "trainer",
    "SpectralRegMixin": "trainer",
    "StopAtMaxStepsMixin": "_resume_at_end",
    "SpectralRegTrainingArguments": "trainer",
    "LyapunovCallback": "callbacks",
    "PseudoEnergyCallback": "callbacks",
}

__all__ = [
    "AttentionWeights",
    "JacobianPenalty",
    "JacobianRegularizer",
    "LinearTarget",
    "LyapunovCallback",
    "PseudoEnergyCallback",
    "SpectralPenalty",
    "SpectralRegMixin",
    "SpectralRegTrainer",
    "SpectralRegTrainingArguments",
    "SpectralRegularizer",
    "StopAtMaxStepsMixin",
    "attention_weights",
    "energy_penalty",
    "jacobian_spectral_penalty",
    "spectral_penalty",
    "spectral_targets",
]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
