"""Theory modules: solvable reductions that measurements of looped attention models can be checked against.

- `jacobiscope.theory.tokens` (theory spec Part A): token dynamics of linear / unnormalized-softmax attention as
  particles on the sphere; the d = 2 Kuramoto–Daido phase form and Ott–Antonsen equation; regime classification
  (``"clustering"``, ``"rotating_clusters"``, ``"oscillation"``, ``"interior_fixed_point"``) and the regimes the
  exact statements predict (`predict_regime`, `regime_table`).
- `jacobiscope.theory.aim` (theory spec Part B): the attention-indexed teacher–student model: online SGD (He1/He2/He3
  and row-softmax links; direct, tied, untied), population losses, gradient-flow ODEs and the truncated moment
  hierarchy.
- `jacobiscope.theory.plots`: phase portraits of the token regimes and escape curves of online SGD (matplotlib,
  ``pip install matplotlib (the plot extra)``, imported only when a plot is made).

Example::

    >>> from jacobiscope import theory
    >>> theory.predict_regime([[1.0, 0.0], [0.0, 1.0]], [[0.5, 1.0], [-1.0, -0.5]]).regime
    'oscillation'
"""
from . import aim, plots, tokens
from .plots import plot_escape_curves, plot_phase_portrait
from .tokens import (
    TOKEN_REGIMES,
    TokenRegime,
    TokenSimulation,
    classify_regime,
    predict_regime,
    regime_table,
    simulate,
)

__all__ = [
    "aim",
    "plots",
    "tokens",
    "TOKEN_REGIMES",
    "TokenRegime",
    "TokenSimulation",
    "classify_regime",
    "predict_regime",
    "regime_table",
    "simulate",
    "plot_phase_portrait",
    "plot_escape_curves",
]
