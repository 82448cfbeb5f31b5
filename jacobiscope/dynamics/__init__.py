"""Dynamical measurements of a looped map: Lyapunov spectrum, oscillation measures, pseudo-energy."""
from .energy import pseudo_energy
from .lyapunov import LyapunovResult, kaplan_yorke_dimension, lyapunov_spectrum
from .oscillation import OscillationMeasures, oscillation_measures

__all__ = [
    "LyapunovResult",
    "OscillationMeasures",
    "kaplan_yorke_dimension",
    "lyapunov_spectrum",
    "oscillation_measures",
    "pseudo_energy",
]
