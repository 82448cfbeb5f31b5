"""Dynamical measurements of a looped map: Lyapunov spectrum, oscillation measures, pseudo-energy."""
from .clusters import TokenOrderParameters, leading_axis_rotation, token_order_parameters
from .energy import pseudo_energy
from .lyapunov import LyapunovResult, kaplan_yorke_dimension, lyapunov_spectrum
from .oscillation import OscillationMeasures, oscillation_measures
from .regime import REGIMES, Regime, RegimeVerdict, classify_dynamics

__all__ = [
    "REGIMES",
    "Regime",
    "RegimeVerdict",
    "TokenOrderParameters",
    "classify_dynamics",
    "leading_axis_rotation",
    "token_order_parameters",
    "LyapunovResult",
    "OscillationMeasures",
    "kaplan_yorke_dimension",
    "lyapunov_spectrum",
    "oscillation_measures",
    "pseudo_energy",
]
