"""Research workflows built on the SDK: training and evaluating the reference Sudoku solvers, loop-count scaling
curves, per-example correlations of dynamics with outcomes.

Example::

    >>> import jacobiscope.recipes
    >>> callable(jacobiscope.recipes.loop_scaling), callable(jacobiscope.recipes.per_example)
    (True, True)

Names are imported on first use (PEP 562): ``import jacobiscope.recipes`` pays for nothing else.
"""
from __future__ import annotations

import importlib

# Public name -> the module that defines it (relative to jacobiscope).
_EXPORTS = {
    "loop_scaling": ".recipes._scaling",
    "per_example": "._per_example",
    "per_example_from_report": "._per_example",
    "solved_from_sudoku_eval": "._per_example",
    "point_biserial": "._per_example",
    "PerExample": "._per_example",
    "evaluate_task": ".recipes._looped_lm_eval",
    "TaskEvaluation": ".recipes._looped_lm_eval",
    "load_looped_lm": ".recipes._looped_lm_eval_checks",
    "LoopedLMRecipe": ".recipes.looped_lm",
    "train_looped_lm": ".recipes.looped_lm",
    "ship_looped_lm": ".recipes._looped_lm_shipping",
    "restart_select": ".recipes._restarts",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], "jacobiscope"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'jacobiscope.recipes' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
