"""jacobiscope: looped transformers as dynamical systems, measured through the Jacobian of the looped map.

Example::

    >>> import jacobiscope
    >>> m = jacobiscope.systems.self_attention_map(tokens=8, dim=16, heads=2)
    >>> sigma = jacobiscope.spectral_norm(m, m.x0).value
    >>> lyap = jacobiscope.lyapunov_spectrum(m, m.x0, steps=20, k=2)
    >>> lyap.exponents.shape
    torch.Size([2])

Names are imported on first use (PEP 562), so ``import jacobiscope`` and ``jacobiscope --help`` do not pay for
torch and transformers. ``import jacobiscope.models`` registers the reference looped models with ``AutoModel``.
"""
from __future__ import annotations

import importlib
import logging

# A library logs, the application decides where it goes: milestones (a row finished, a checkpoint written) are
# INFO records of the "jacobiscope.*" loggers, silent until the user configures logging.
logging.getLogger("jacobiscope").addHandler(logging.NullHandler())

__version__ = "0.1.0"

_SUBMODULES = ("adapters", "data", "diagnostics", "dynamics", "hub", "linalg", "models", "recipes", "systems", "theory",
               "training")

# Public name -> the submodule that defines it.
_EXPORTS = {
    "hub": ("load_pretrained",),
    "training": ("LyapunovCallback", "PseudoEnergyCallback", "SpectralRegMixin", "SpectralRegTrainer",
                 "SpectralRegTrainingArguments", "SpectralRegularizer", "energy_penalty", "jacobian_spectral_penalty",
                 "spectral_penalty"),
    "adapters": ("check_adapter", "looped_block", "register_adapter", "native_loop", "list_recurrences",
                 "register_recurrence", "map_source"),
    "_analyze": ("analyze", "describe", "LayerPlan", "LayerPlans"),
    "_depth": ("depth_dynamics", "DepthDynamics", "DepthResults"),
    "_lens": ("loop_lens", "LoopLens", "intervene"),
    "dynamics._finite_time": ("finite_time_exponents", "FiniteTimeExponents"),
    "report": ("LayerResult", "Report"),
    "dynamics": ("LyapunovResult", "OscillationMeasures", "classify_dynamics", "kaplan_yorke_dimension",
                 "token_order_parameters", "lyapunov_spectrum", "oscillation_measures", "pseudo_energy"),
    "errors": ("AdapterError", "ArgumentError", "BudgetError", "ConvergenceWarning", "DiagnosticDefinitionError", "DiagnosticError",
               "FolderBusyError", "HubError", "JacobiscopeError", "MemoryBudgetError", "NonFiniteStateError",
               "NonFiniteWarning", "NotARegularFileError", "OutputInsideInputError", "PathError", "RecipeError",
               "ReportFormatError", "SlowDerivativesWarning", "StateError", "StepError", "StepOutputError"),
    "linalg": ("EigenResult", "JacobianOperator", "SpectralNormResult", "jacobian", "jacobian_eigenvalues",
               "spectral_norm"),
    "maps": ("LoopedMap", "as_looped_map"),
    "diagnostics": ("Diagnostic", "MeasureContext", "register_diagnostic", "list_diagnostics", "get_diagnostic",
                    "measure", "DiagnosticResult", "Option"),
}

# Research tooling reached through its subpackage (the root keeps the SDK's entry points): the paper-specific
# analyses live in `jacobiscope.dynamics`, the research workflows in `jacobiscope.recipes`. The old root names
# still work, with a DeprecationWarning naming the new home.
_MOVED = {
    **dict.fromkeys(("NormBound", "norm_bound", "drive_map", "without_norm", "EnergySplit", "LoopOverlaps",
                     "SymmetricEigenResult", "energy_split", "symmetric_eigenpairs", "symmetric_overlap_along_loop"),
                    "dynamics"),
    **dict.fromkeys(("loop_scaling", "per_example", "per_example_from_report", "solved_from_sudoku_eval",
                     "PerExample"), "recipes"),
}
_ORIGIN = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(set(_ORIGIN) | {"adapters", "diagnostics", "dynamics", "hub", "linalg", "models", "systems", "theory",
                                 "training"})


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _ORIGIN:
        value = getattr(importlib.import_module(f".{_ORIGIN[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in _MOVED:
        import warnings

        home = f"jacobiscope.{_MOVED[name]}"
        warnings.warn(f"jacobiscope.{name} is research tooling and lives in {home}: use {home}.{name} (the root "
                      "keeps the SDK's entry points)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)
    raise AttributeError(f"module 'jacobiscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
