"""The verdict vocabulary, the thresholds and the verdict object of `jacobiscope.classify_dynamics`."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import torch

from ..errors import ArgumentError
from . import _regime_evidence as measured

class Regime(str, Enum):
    """The one vocabulary of verdicts, used by the classifier, the diagnostics, reports and the CLI.

    Example::

        >>> from jacobiscope.dynamics.regime import Regime
        >>> Regime("periodic") is Regime.PERIODIC, Regime.CRITICAL == "critical"
        (True, True)

    A `str` enum: a verdict compares equal to its plain name and JSON holds the name.

    - ``converging``: to a fixed point (the steps collapse, or shrink exponentially while lambda_max < 0).
    - ``periodic``: a period-p orbit, p >= 2 (``evidence["period"]``), attracting or neutral.
    - ``critical``: lambda_max = 0 within the tolerance and its 95% interval (or above 0 by less than one e-fold
      over the whole run: neutral drift), no period, bounded.
    - ``chaotic``: lambda_max > 0 (its whole 95% interval), bounded, no period.
    - ``oscillating``: quasi-periodic: lambda_max ~ 0 with a complex Jacobian eigenvalue on the unit circle.
    - ``diverging``: NaN/Inf, or the norm grows without bound.
    - ``undetermined``: the measurements do not decide yet; ``evidence["loops_needed"]`` says how many loops would.
    - ``unknown``: not classified (no exponent measured and nothing observed that decides).
    """

    CONVERGING = "converging"
    PERIODIC = "periodic"
    CRITICAL = "critical"
    CHAOTIC = "chaotic"
    OSCILLATING = "oscillating"
    DIVERGING = "diverging"
    UNDETERMINED = "undetermined"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


#: The verdicts `classify_dynamics` reaches (every `Regime` but ``unknown``).
REGIMES = tuple(regime.value for regime in Regime if regime is not Regime.UNKNOWN)


@dataclass(frozen=True)
class RegimeThresholds:
    """Every threshold of `classify_dynamics`, with the calibrated defaults (see its calibration table).

    Attributes:
        tol: the critical band (nats per loop): ``critical`` needs the late estimate of lambda_max within ``tol``
            of 0 and its 95% interval around 0. The paper's best looped models sit at 0 to +0.1; the calibration
            maps that are not critical sit at |lambda| >= 0.42 or are decided by their orbits (fixed point, period).
        max_half_width: the interval's half-width must be at most this for ``critical``: a wider interval is
            ``undetermined`` (a short run of a chaotic map can have a small estimate and a huge interval).
        drift_tol: the late-half estimate may differ from the whole-run estimate by this much (or by its own
            interval) before the run counts as still in its transient.
        decay_ratio: the steps have collapsed (a fixed point is reached) when the late step is below
            ``decay_ratio`` times the largest.
        max_period, period_rtol: periods ``2..max_period`` are searched; ``p`` closes when
            ``max ||X_{t+p} - X_t||`` over the last quarter is below ``period_rtol`` times the median step there
            (plus a rounding floor of ``100 eps ||X||`` in the states' own precision).
        unit_circle_tol: ``oscillating`` needs a complex eigenvalue among the dominant ones (within 1% of the
            spectral radius) with ``|ln|mu|| <= unit_circle_tol`` (the critical band, as a modulus).
        fixed_point_radius: a fixed point is only believed when the Jacobian's spectral radius at the last state is
            at most this (when eigenvalues were measured): above 1 the point repels (1% margin for Arnoldi).
        divergence_ratio, growth_fraction, growth_rate: diverging when the second half's largest norm exceeds the
            first half's by ``divergence_ratio``, or when the norm grows at more than ``growth_rate`` nats per
            loop over the last quarter, in at least ``growth_fraction`` of the last half's loops, by 1.5x or more.
        resolution: the smallest standard error believed (rounding of the log-norms), nats per loop.
    """

    tol: float = 0.1
    max_half_width: float = 0.2
    drift_tol: float = 0.05
    decay_ratio: float = 1e-3
    max_period: int = 16
    period_rtol: float = 1e-3
    unit_circle_tol: float = 0.1
    fixed_point_radius: float = 1.01
    divergence_ratio: float = 1e3
    growth_fraction: float = 0.9
    growth_rate: float = 0.01
    resolution: float = 1e-6

    def checked(self) -> "RegimeThresholds":
        for name in ("tol", "max_half_width", "drift_tol", "fixed_point_radius", "period_rtol", "unit_circle_tol", "growth_rate", "resolution"):
            measured.require_number(getattr(self, name), name, minimum=0.0)
        measured.require_number(self.divergence_ratio, "divergence_ratio", minimum=1.0)
        measured.require_number(self.growth_fraction, "growth_fraction", minimum=0.0, maximum=1.0)
        measured.require_number(self.decay_ratio, "decay_ratio", minimum=0.0, maximum=1.0)
        if isinstance(self.max_period, bool) or not isinstance(self.max_period, int) or self.max_period < 0:
            raise ArgumentError(f"max_period must be a non-negative int (0 disables the period search), got "
                                f"{self.max_period!r}.")
        return self


@dataclass
class RegimeVerdict:
    """What `classify_dynamics` returns.

    Attributes:
        regime: a `Regime` value (``"converging"``, ``"periodic"``, ...).
        evidence: the numbers behind the verdict as plain ``float`` / ``int`` / ``bool`` / ``str`` (JSON-ready;
            what could not be measured is absent), including ``reason``: one sentence a person can check.
    """

    regime: str
    evidence: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return self.evidence.get("reason", "")

    @property
    def period(self) -> int:
        """The orbit's period for ``periodic`` verdicts, else 0."""
        return int(self.evidence.get("period", 0))

    def as_dict(self) -> dict:
        """``{"regime": ..., "reason": ..., "evidence": {...}}`` with plain Python values."""
        return {"regime": self.regime, "reason": self.reason, "evidence": dict(self.evidence)}


@dataclass
class _Observed:
    """Everything measured, gathered once for the rules."""

    estimate: measured.ExponentEstimate | None
    trajectory: torch.Tensor | None
    steps: torch.Tensor | None
    norms: torch.Tensor | None
    eps: float
    nonfinite_step: int
    eigenvalues: list | None
    spectral_radius: float | None
    evidence: dict
