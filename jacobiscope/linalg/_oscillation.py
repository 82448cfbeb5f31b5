"""Oscillation measures of a Jacobian spectrum: how rotational (complex) and how expanding a loop is."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import math

import torch

from ..errors import ArgumentError

__all__ = ["oscillation_measures", "OscillationMeasures"]


@dataclass
class OscillationMeasures:
    """Summary of a set of eigenvalues (each field has the batch shape of the eigenvalues, without ``k``).

    Attributes:
        spectral_radius: ``max |lambda|``.
        complex_fraction: fraction of eigenvalues with ``|Im lambda| > imag_tol * max(1, |lambda|)``
            (oscillatory modes; they come in conjugate pairs).
        max_imag: ``max |Im lambda|``.
        max_rotation_angle: largest ``|arg lambda|`` among the oscillatory eigenvalues, in radians per loop
            (0 when there are none); ``pi`` is a period-2 flip, small angles slow rotations.
        mean_rotation_angle: mean ``|arg lambda|`` over the oscillatory eigenvalues (0 when there are none).
        outside_unit_circle_fraction: fraction with ``|lambda| > 1 + unit_tol`` (locally expanding modes).
        count: how many eigenvalues were summarized.
        rotation_angles: ``|arg lambda|`` of every eigenvalue, ``[*batch, k]`` (0 for real positive ones).
    """

    spectral_radius: torch.Tensor
    complex_fraction: torch.Tensor
    max_imag: torch.Tensor
    max_rotation_angle: torch.Tensor
    mean_rotation_angle: torch.Tensor
    outside_unit_circle_fraction: torch.Tensor
    count: int
    rotation_angles: torch.Tensor

    def as_dict(self) -> dict:
        """Plain floats (batch of one) or lists, for reports and JSON."""
        out = {}
        for key, value in asdict(self).items():
            if isinstance(value, torch.Tensor):
                value = value.tolist()
            out[key] = value
        return out


def oscillation_measures(eigenvalues, *, imag_tol: float = 1e-6, unit_tol: float = 1e-9) -> OscillationMeasures:
    """Spectral radius, oscillatory fraction, rotation angles and expansion of a Jacobian spectrum.

    Example::

        >>> import math, torch, jacobiscope
        >>> rotation = 1.1 * torch.tensor([[math.cos(0.3), -math.sin(0.3)], [math.sin(0.3), math.cos(0.3)]])
        >>> m = jacobiscope.oscillation_measures(torch.linalg.eigvals(rotation))
        >>> round(float(m.spectral_radius), 4), float(m.complex_fraction), round(float(m.max_rotation_angle), 4)
        (1.1, 1.0, 0.3)

    Arguments:
        eigenvalues: a complex (or real) tensor ``[*batch, k]``, or an `EigenResult`.
        imag_tol: relative threshold above which an imaginary part counts as oscillatory.
        unit_tol: slack on the unit circle for ``outside_unit_circle_fraction``.

    The normalization result of Tomihari & Karakida (NeurIPS 2025): normalization pulls the complex
    (oscillatory) eigenvalues of the looped map's Jacobian inside the unit circle; ``complex_fraction`` and
    ``outside_unit_circle_fraction`` make that visible.
    """
    for value, name in ((imag_tol, "imag_tol"), (unit_tol, "unit_tol")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ArgumentError(f"{name} must be a finite number >= 0, got {value!r} — pass e.g. {name}=1e-6.")
    values = eigenvalues if isinstance(eigenvalues, torch.Tensor) else getattr(eigenvalues, "values", eigenvalues)
    try:
        values = torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ArgumentError(f"eigenvalues must be a tensor of numbers [*batch, k] or an EigenResult, got "
                            f"{type(values).__name__} — pass e.g. jacobian_eigenvalues(...).values.") from error
    if values.dtype == torch.bool:
        raise ArgumentError("eigenvalues must be numbers, got a bool tensor — pass e.g. jacobian_eigenvalues(...).values.")
    if not (values.is_complex() or values.is_floating_point()):
        values = values.to(torch.float64)  # integer eigenvalues are eigenvalues; torch.complex wants floats
    if values.dtype in (torch.float16, torch.bfloat16):
        values = values.float()
    if not values.is_complex():
        values = torch.complex(values, torch.zeros_like(values))
    if values.dim() == 0:
        values = values.reshape(1)
    if values.shape[-1] == 0:
        # max over an empty k failed with an IndexError; no eigenvalue has no spectral radius.
        raise ArgumentError(f"oscillation_measures needs at least one eigenvalue [*batch, k >= 1], got shape "
                            f"{tuple(values.shape)} — pass e.g. jacobian_eigenvalues(...).values.")
    modulus = values.abs()
    imaginary = values.imag.abs()
    oscillatory = imaginary > imag_tol * modulus.clamp_min(1.0)
    angles = torch.angle(values).abs()
    k = values.shape[-1]
    count_oscillatory = oscillatory.sum(-1)
    zeros = torch.zeros_like(modulus[..., 0])
    oscillatory_angles = torch.where(oscillatory, angles, torch.zeros_like(angles))
    return OscillationMeasures(
        spectral_radius=modulus.max(-1).values,
        complex_fraction=oscillatory.to(modulus.dtype).mean(-1),
        max_imag=imaginary.max(-1).values,
        max_rotation_angle=oscillatory_angles.max(-1).values,
        mean_rotation_angle=torch.where(
            count_oscillatory > 0, oscillatory_angles.sum(-1) / count_oscillatory.clamp_min(1), zeros
        ),
        outside_unit_circle_fraction=(modulus > 1 + unit_tol).to(modulus.dtype).mean(-1),
        count=k,
        rotation_angles=angles,
    )
