"""The Jacobian's top eigenvalues at the last finite loop, and their oscillation measures."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from .._values import _finite_or_nan, _is_number, _num
from ..errors import ConvergenceWarning
from ._base import Diagnostic, MeasureContext
from ._result import DiagnosticResult, bad, is_int, numbers

OSCILLATION_KEYS = ("spectral_radius", "complex_fraction", "max_imag", "max_rotation_angle", "mean_rotation_angle",
                    "outside_unit_circle_fraction")


@dataclass
class EigenvaluesMeasurement(DiagnosticResult):
    """The Jacobian's top eigenvalues at ``loop`` as ``[re, im]`` pairs, with their oscillation measures
    (spectral_radius, complex_fraction, rotation angles, outside_unit_circle_fraction, max_residual).

    Example::

        >>> from jacobiscope.diagnostics import EigenvaluesMeasurement
        >>> result = EigenvaluesMeasurement(4, [[0.0, 0.9], [0.0, -0.9]], {"spectral_radius": 0.9,
        ...                                                                   "complex_fraction": 1.0})
        >>> result.complex_values[0], result.columns()
        (0.9j, {'rho(J)': 0.9, 'complex': '100%'})
    """

    loop: int
    values: list
    oscillation: dict | None

    headers = ("rho(J)", "complex")
    scalar_names = ("eigen_loop", *OSCILLATION_KEYS)
    glossary = {
        "rho(J)": ("-", "spectral radius of J at the last loop (largest |eigenvalue|): above 1 a perturbation along its "
                        "eigenvector grows, below 1 it shrinks."),
        "complex": ("% of top-k", "share of J's top eigenvalues that are complex (rotating, oscillatory modes)."),
    }
    panels = 2
    figure_size = (12.0, 5.0)

    @property
    def complex_values(self) -> list[complex]:
        return [complex(re, im) for re, im in self.values]

    @property
    def spectral_radius(self) -> float:
        return float((self.oscillation or {}).get("spectral_radius", math.nan))

    def columns(self) -> dict:
        oscillation = self.oscillation if isinstance(self.oscillation, dict) else {}
        share = oscillation.get("complex_fraction")
        cell = f"{100 * share:.0f}%" if _is_number(share) and math.isfinite(share) else _num(share)
        return {"rho(J)": oscillation.get("spectral_radius"), "complex": cell}

    def scalars(self) -> dict:
        oscillation = self.oscillation if isinstance(self.oscillation, dict) else {}
        return {"eigen_loop": self.loop, **{key: oscillation.get(key) for key in OSCILLATION_KEYS}}

    def problems(self, name: str) -> list[str]:
        problems = []
        if self.values is not None and (not isinstance(self.values, list) or not all(
                isinstance(pair, list) and len(pair) == 2 and numbers(pair) for pair in self.values)):
            problems.append(bad(name, self.values, "null or a list of [re, im] number pairs"))
        if self.loop is not None and not is_int(self.loop):
            problems.append(bad("eigen_loop", self.loop, "an int or null"))
        if self.oscillation is not None and not isinstance(self.oscillation, dict):
            problems.append(bad("oscillation", self.oscillation, "an object or null"))
        elif self.oscillation is not None:
            problems += [bad(f"oscillation[{key!r}]", value, "a number") for key, value in self.oscillation.items()
                         if key in OSCILLATION_KEYS and not _is_number(value)]
        return problems

    def relation_problems(self, name: str, row) -> list[str]:
        problems = []
        if (self.values is None) != (self.loop is None):
            problems.append("eigenvalues and eigen_loop must both be set or both be None")
        missing = [key for key in OSCILLATION_KEYS if key not in (self.oscillation or {})]
        if isinstance(self.oscillation, dict) and missing:
            problems.append(f"oscillation lacks {', '.join(missing)}")
        return problems

    @classmethod
    def draw(cls, axes, entries) -> None:
        """Left: the complex plane with the unit circle. Right: modulus against angle, which stays readable when
        the eigenvalues crowd near 1 (the usual case for a trained loop)."""
        from .._figures import MARKERS, no_data

        plane, polar = axes
        angles = [2 * math.pi * i / 256 for i in range(257)]
        plane.plot([math.cos(a) for a in angles], [math.sin(a) for a in angles], color="0.5", lw=1,
                   label="unit circle", gid="unit-circle")
        plane.axhline(0, color="0.85", lw=0.8, zorder=0)
        plane.axvline(0, color="0.85", lw=0.8, zorder=0)
        polar.axhline(1.0, color="0.5", lw=1, label="|$\\mu$| = 1")
        drawn = 0
        for i, (_, result, label, color) in enumerate(entries):
            pairs = [p for p in (result.values or [] if result else []) if isinstance(p, (list, tuple)) and len(p) == 2]
            if not pairs:
                continue
            real, imag = _finite_or_nan(p[0] for p in pairs), _finite_or_nan(p[1] for p in pairs)
            suffix = f" (t={result.loop})" if result.loop is not None else ""
            style = dict(linestyle="none", marker=MARKERS[i % len(MARKERS)], ms=5, alpha=0.8, color=color)
            plane.plot(real, imag, label=label + suffix, **style)
            polar.plot([math.atan2(y, x) for x, y in zip(real, imag)], [math.hypot(x, y) for x, y in zip(real, imag)],
                       label=label + suffix, **style)
            drawn += 1
        if drawn:  # outside the axes: eigenvalues can sit anywhere, a legend inside would cover some
            polar.legend(fontsize="small" if drawn <= 6 else "x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                         ncols=1 + drawn // 20)
        _label_eigen_axes(plane, polar)
        if not drawn:
            no_data(plane, "no eigenvalues in this report")


def _label_eigen_axes(plane, polar) -> None:
    plane.set_aspect("equal", adjustable="datalim")
    plane.set_xlabel("Re $\\mu$")
    plane.set_ylabel("Im $\\mu$")
    plane.set_title("eigenvalues $\\mu$ of J = dF/dX (top-k by modulus)")
    polar.set_xlim(-math.pi - 0.1, math.pi + 0.1)
    polar.set_xticks([-math.pi, -math.pi / 2, 0, math.pi / 2, math.pi],
                     ["$-\\pi$", "$-\\pi/2$", "0", "$\\pi/2$", "$\\pi$"])
    polar.set_xlabel("angle arg $\\mu$ (rad; 0 = real positive, $\\pm\\pi$ = real negative)")
    polar.set_ylabel("modulus |$\\mu$|")
    polar.set_title("the same eigenvalues: modulus against angle")


class Eigenvalues(Diagnostic):
    """The ``eigen_k`` eigenvalues of largest modulus (restarted Arnoldi on jvps), with the spectral radius, the
    complex (oscillatory) share and rotation angles; a row is flagged when Arnoldi's residual exceeds 0.05."""

    name = "eigenvalues"
    description = "the eigen_k largest-modulus eigenvalues of J (Arnoldi): rho(J), rotation"
    result_type = EigenvaluesMeasurement
    listed = True
    column_prefix = ""  # the historic DataFrame names (max_spectral_norm, lambda_max, ...)
    figure_always = True

    def cost(self, state_size, loops, options):
        # the Krylov basis plus up to eigen_restarts restarts: ~110-140 jvps measured (GPT-2, BERT, ItrSA blocks)
        basis = max(2 * options.get("eigen_k", 4) + 1, options.get("eigen_k", 4) + 20)
        return {"jvp": min(basis * (1 + options.get("eigen_restarts", 4)), 30 * basis)}

    def compute(self, context: MeasureContext):
        from ..dynamics.oscillation import oscillation_measures
        from ..linalg.eig import jacobian_eigenvalues

        loop = context.last_finite
        count = min(context.options.get("eigen_k", 4), context.state_size)
        with warnings.catch_warnings():
            # A capped Arnoldi run is the default here; its residuals are reported instead of a warning.
            warnings.simplefilter("ignore", ConvergenceWarning)
            result = jacobian_eigenvalues(context.looped, context.states[loop : loop + 1], k=count, tol=1e-3,
                                          max_restarts=context.options.get("eigen_restarts", 4),
                                          seed=context.options.get("seed", 0))
        values = result.values[0]
        max_residual = float(result.residuals.max()) if result.residuals is not None else 0.0
        if max_residual > 0.05:
            context.flags.append(f"eigenvalues inaccurate (residual {max_residual:.2g}; raise eigen_restarts)")
        measures = oscillation_measures(values)
        oscillation = {key: float(getattr(measures, key)) for key in OSCILLATION_KEYS}
        oscillation["max_residual"] = max_residual
        return EigenvaluesMeasurement(loop=loop, values=[[float(v.real), float(v.imag)] for v in values],
                                      oscillation=oscillation)
