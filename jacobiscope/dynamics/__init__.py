"""Dynamical measurements of a looped map: Lyapunov spectrum, oscillation measures, pseudo-energy."""
from .clusters import TokenOrderParameters, leading_axis_rotation, token_order_parameters
from ._attractor_census import Attractor, AttractorCensus, attractor_census, wilson_interval
from ._depth_forecast import DEPTH_WORDS, DepthForecast, forecast_depth
from ._finite_time import FiniteTimeExponents, finite_time_exponents
from .energy import pseudo_energy
from ._norm_bound import NormBound, norm_bound
from ._submaps import drive_map, without_norm
from ._symmetric import (EnergySplit, LoopOverlaps, SymmetricEigenResult, energy_split, symmetric_eigenpairs,
                         symmetric_overlap_along_loop)
from .lyapunov import LyapunovResult, kaplan_yorke_dimension, lyapunov_spectrum
from .oscillation import OscillationMeasures, oscillation_measures
from .regime import REGIMES, Regime, RegimeVerdict, classify_dynamics

__all__ = [
    "REGIMES",
    "Attractor",
    "AttractorCensus",
    "attractor_census",
    "wilson_interval",
    "DEPTH_WORDS",
    "DepthForecast",
    "forecast_depth",
    "FiniteTimeExponents",
    "finite_time_exponents",
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
    "NormBound",
    "norm_bound",
    "drive_map",
    "without_norm",
    "EnergySplit",
    "LoopOverlaps",
    "SymmetricEigenResult",
    "energy_split",
    "symmetric_eigenpairs",
    "symmetric_overlap_along_loop",
]
