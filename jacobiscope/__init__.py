"""jacobiscope: looped transformers as dynamical systems, measured through the Jacobian of the looped map.

Example::

    >>> import jacobiscope
    >>> m = jacobiscope.systems.self_attention_map(tokens=8, dim=16, heads=2)
    >>> sigma = jacobiscope.spectral_norm(m, m.x0).value
    >>> lyap = jacobiscope.lyapunov_spectrum(m, m.x0, steps=20, k=2)
    >>> lyap.exponents.shape
    torch.Size([2])
"""
from . import adapters, dynamics, hub, linalg, models, systems, theory, training
from .hub import load_pretrained
from .training import (
    LyapunovCallback,
    PseudoEnergyCallback,
    SpectralRegMixin,
    SpectralRegTrainer,
    SpectralRegTrainingArguments,
    SpectralRegularizer,
    energy_penalty,
    jacobian_spectral_penalty,
    spectral_penalty,
)
from .adapters import AdapterError, check_adapter, looped_block, register_adapter
from .analyze import analyze, describe
from .report import LayerResult, Report
from .dynamics import (
    LyapunovResult,
    OscillationMeasures,
    classify_dynamics,
    kaplan_yorke_dimension,
    token_order_parameters,
    lyapunov_spectrum,
    oscillation_measures,
    pseudo_energy,
)
from .errors import (
    ArgumentError,
    ConvergenceWarning,
    JacobiscopeError,
    MemoryBudgetError,
    NonFiniteStateError,
    NonFiniteWarning,
    StateError,
    StepOutputError,
)
from .linalg import (
    EigenResult,
    JacobianOperator,
    SpectralNormResult,
    jacobian,
    jacobian_eigenvalues,
    spectral_norm,
)
from .maps import LoopedMap, as_looped_map

__version__ = "0.1.0"

__all__ = [
    "LyapunovCallback",
    "PseudoEnergyCallback",
    "SpectralRegMixin",
    "SpectralRegTrainer",
    "SpectralRegTrainingArguments",
    "SpectralRegularizer",
    "energy_penalty",
    "jacobian_spectral_penalty",
    "spectral_penalty",
    "theory",
    "training",
    "hub",
    "load_pretrained",
    "models",
    "LayerResult",
    "Report",
    "analyze",
    "describe",
    "classify_dynamics",
    "token_order_parameters",
    "AdapterError",
    "adapters",
    "check_adapter",
    "looped_block",
    "register_adapter",
    "ArgumentError",
    "ConvergenceWarning",
    "EigenResult",
    "JacobianOperator",
    "JacobiscopeError",
    "LoopedMap",
    "LyapunovResult",
    "MemoryBudgetError",
    "NonFiniteStateError",
    "NonFiniteWarning",
    "OscillationMeasures",
    "SpectralNormResult",
    "StateError",
    "StepOutputError",
    "as_looped_map",
    "dynamics",
    "jacobian",
    "jacobian_eigenvalues",
    "kaplan_yorke_dimension",
    "linalg",
    "lyapunov_spectrum",
    "oscillation_measures",
    "pseudo_energy",
    "spectral_norm",
    "systems",
]
