"""Oscillation measures of Jacobian eigenvalues (defined in `jacobiscope.linalg._oscillation`, next to the eigen
solver that returns them; this is their public home).

Example::

    >>> import torch
    >>> from jacobiscope.dynamics.oscillation import oscillation_measures
    >>> round(float(oscillation_measures(torch.tensor([0.9j, -0.9j, 0.5])).complex_fraction), 4)
    0.6667
"""
from ..linalg._oscillation import OscillationMeasures, oscillation_measures  # noqa: F401

__all__ = ["OscillationMeasures", "oscillation_measures"]
