"""The measurements behind a regime verdict: the exponent's late-window estimate and confidence interval, step
decay, return distances (periods), norm growth; and the argument parsing `classify_dynamics` shares."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import ArgumentError

# Two-sided 95% quantiles of Student's t by degrees of freedom (batch means over few blocks need them: with 4
# blocks the interval is 3.18 standard errors wide on each side, not 1.96).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t_quantile(dof: int) -> float:
    """The two-sided 95% Student-t quantile for ``dof`` degrees of freedom (the next smaller tabulated one)."""
    if dof < 1:
        return math.inf
    if dof <= 30:
        return _T95[max(d for d in _T95 if d <= dof)]
    # Cornish-Fisher expansion of t around the normal quantile: within 1e-4 of the exact value from 31 dof on
    # (1.96 alone would be up to 4% too narrow there, an anti-conservative interval)
    z, nu = 1.959963984540054, float(dof)
    return (z + (z**3 + z) / (4 * nu) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * nu**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * nu**3))


@dataclass
class ExponentEstimate:
    """The largest exponent over the late window, with its standard error and 95% half-width."""

    value: float
    stderr: float
    half_width: float
    first_loop: int
    last_loop: int
    whole: float
    drift: float

    @property
    def low(self) -> float:
        return self.value - self.half_width

    @property
    def high(self) -> float:
        return self.value + self.half_width


def exponent_from_history(history: torch.Tensor, resolution: float) -> ExponentEstimate:
    """Late-half estimate from running estimates ``history[t]`` (the average over loops ``1..t+1``).

    The local exponent of loop ``t`` is ``(t+1) h_t - t h_{t-1}``; the estimate is their mean over the last half of
    the loops, its error the batch-means standard error over up to 10 blocks (a trend inside the window widens it),
    never below ``resolution`` (rounding of the log-norms). ``drift`` compares the window with the whole run.
    """
    count = history.numel()
    loops = torch.arange(1, count + 1, dtype=torch.float64)
    totals = history * loops
    local = torch.cat([totals[:1], totals[1:] - totals[:-1]])
    start = count // 2
    window = local[start:]
    blocks = max(2, min(10, window.numel() // 4)) if window.numel() >= 4 else window.numel()
    value = float(window.mean())
    if blocks >= 2:
        size = window.numel() // blocks
        means = window[window.numel() - size * blocks:].reshape(blocks, size).mean(1)
        stderr = float(means.std() / math.sqrt(blocks))
    else:
        stderr = math.inf
    stderr = max(stderr, resolution)
    whole = float(history[-1])
    return ExponentEstimate(value=value, stderr=stderr, half_width=t_quantile(blocks - 1) * stderr,
                            first_loop=start + 1, last_loop=count, whole=whole, drift=abs(value - whole))


def exponent_from_summary(value: float, stderr: float | None, resolution: float) -> ExponentEstimate:
    """An estimate from one number and its standard error (the engine's 10 batch means: t with 9 dof)."""
    error = max(stderr, resolution) if stderr is not None and math.isfinite(stderr) else math.inf
    if value == -math.inf and stderr == 0:
        error = 0.0  # an exact -inf (a tangent annihilated): no interval around it
    return ExponentEstimate(value=value, stderr=error, half_width=t_quantile(9) * error, first_loop=0, last_loop=0,
                            whole=value, drift=0.0)


def log_slope(series: torch.Tensor) -> tuple[float, float]:
    """Least-squares slope of ``log(series)`` per loop and its standard error (zeros clamped to the tiniest
    normal number)."""
    y = series.clamp_min(torch.finfo(torch.float64).tiny).log()
    t = torch.arange(y.numel(), dtype=y.dtype, device=y.device)
    t = t - t.mean()
    spread = float((t * t).sum())
    slope = float((t * (y - y.mean())).sum() / spread)
    if y.numel() <= 2:
        return slope, math.inf
    residual = y - y.mean() - slope * t
    return slope, math.sqrt(float((residual * residual).sum()) / (y.numel() - 2) / spread)


@dataclass
class StepEvidence:
    """How the step sizes ``||X_{t+1} - X_t||`` behave over the last half of the loops."""

    largest: float
    late: float
    ratio: float
    log_rate: float
    log_rate_stderr: float

    def collapsed(self, decay_ratio: float) -> bool:
        return self.largest == 0 or self.late == 0 or self.ratio <= decay_ratio

    def shrinking(self) -> bool:
        """Steps shrink exponentially: a significantly negative log-slope (95%) over the last half."""
        bound = self.log_rate + 2.0 * self.log_rate_stderr
        return self.log_rate < -1e-3 and bound < 0


def step_evidence(steps: torch.Tensor) -> StepEvidence:
    quarter = max(steps.numel() // 4, 1)
    largest = float(steps.max())
    late = float(steps[-quarter:].median())
    rate, error = log_slope(steps[steps.numel() // 2:])
    return StepEvidence(largest=largest, late=late, ratio=late / largest if largest > 0 else 0.0, log_rate=rate,
                        log_rate_stderr=error)


@dataclass
class ReturnEvidence:
    """Return distances over the last quarter: the smallest closing period (0 if none) and the closest return."""

    period: int
    closest: int
    closest_residual: float
    checked: int = 0


def return_evidence(trajectory: torch.Tensor, max_period: int, rtol: float, eps: float) -> ReturnEvidence:
    """Smallest ``p`` in ``[2, max_period]`` whose ``max_t ||X_{t+p} - X_t||`` over the last states is below ``rtol``
    times the median step there (plus a rounding floor ``100 eps max||X||``). Each ``p`` is checked on the last
    quarter of the run, or on the last ``2p + 1`` states when the quarter is shorter; the first quarter of the run
    is never used (a transient there would hide a period, never invent one). ``checked`` is the largest ``p``
    the run was long enough to check."""
    count = trajectory.shape[0]
    best_p, best, checked = 0, math.inf, 0
    for p in range(2, max_period + 1):
        length = max(count // 4, 2 * p + 1)
        if length > count - count // 4:
            break
        checked = p
        tail = trajectory[-length:]
        typical = float((tail[1:] - tail[:-1]).norm(dim=1).median())
        floor = 100 * eps * float(tail.norm(dim=1).max())
        residual = float((tail[p:] - tail[:-p]).norm(dim=1).max())
        relative = residual / typical if typical > 0 else math.inf
        if relative < best:
            best_p, best = p, relative
        if residual <= rtol * typical + floor:
            return ReturnEvidence(p, p, relative, checked)
    return ReturnEvidence(0, best_p, best, checked)


@dataclass
class RotationEvidence:
    """How the last half of the orbit turns in its main plane (the top two principal axes of its states)."""

    plane_share: float
    aspect: float
    angle_per_loop: float
    same_sense: float
    radius_spread: float

    def rotating(self) -> bool:
        """A steady turn in a genuine plane: most of the motion in it (80%), not a line (the second axis at least
        0.3 of the first), turning the same way in 90% of the loops, at a radius that varies by at most 35%."""
        return (self.plane_share >= 0.8 and self.aspect >= 0.3 and self.same_sense >= 0.9
                and self.radius_spread <= 0.35 and abs(self.angle_per_loop) > 1e-3)


def rotation_evidence(trajectory: torch.Tensor) -> RotationEvidence | None:
    """The late orbit projected on its main plane as complex numbers ``z_t``; angle steps ``arg(z_{t+1} / z_t)``."""
    late = trajectory[trajectory.shape[0] // 2:]
    if late.shape[0] < 6 or late.shape[1] < 2:
        return None
    centered = late - late.mean(0)
    _, singular, axes = torch.linalg.svd(centered, full_matrices=False)
    energy = float((singular * singular).sum())
    if energy == 0 or singular.numel() < 2 or float(singular[1]) == 0:
        return None
    plane = torch.complex(centered @ axes[0], centered @ axes[1])
    turns = torch.angle(plane[1:] / plane[:-1])
    radius = plane.abs()
    return RotationEvidence(
        plane_share=float((singular[:2] ** 2).sum()) / energy, aspect=float(singular[1] / singular[0]),
        angle_per_loop=float(turns.mean()),
        same_sense=float(max((turns > 0).to(torch.float64).mean(), (turns < 0).to(torch.float64).mean())),
        radius_spread=float(radius.std() / radius.mean().clamp_min(1e-300)))


def norm_growth(norms: torch.Tensor) -> dict:
    """Growth of the norm: second-half maximum over first-half maximum, the log-rate over the last quarter, the
    share of rising loops in the last half and the growth over the last half. A loop counts as rising when the norm
    grows by more than 1e-6 of itself: float32 rounding (which differs between an eager and a recorded orbit) must
    not flip the count where the norm has settled."""
    half = norms.numel() // 2
    late_steps = norms[half:].diff()
    rising = late_steps > 1e-6 * norms[half:-1].abs()
    early, late = float(norms[:half].max()), float(norms[half:].max())
    growth = late / early if early > 0 else (math.inf if late > 0 else 1.0)
    rate, _ = log_slope(norms[-max(norms.numel() // 4, 3):])
    return {"norm_first": float(norms[0]), "norm_last": float(norms[-1]), "norm_growth": growth,
            "norm_log_rate": rate, "norm_rising_fraction": float(rising.to(torch.float64).mean()),
            "norm_last_half_growth": float(norms[-1] / norms[half].clamp_min(1e-300))}


def unit_circle_pair(eigenvalues, tolerance: float) -> complex | None:
    """A dominant complex eigenvalue (modulus within 1% of the largest, angle in (1e-3, pi - 1e-3): a real
    eigenvalue with rounding in its imaginary part is not a rotation) on the unit circle
    (``|ln|mu|| <= tolerance``), or None."""
    if not eigenvalues:
        return None
    radius = max(abs(value) for value in eigenvalues)
    for value in sorted(eigenvalues, key=abs, reverse=True):
        if abs(value) < 0.99 * radius or abs(value) == 0:
            break
        angle = abs(math.atan2(value.imag, value.real))
        if abs(math.log(abs(value))) <= tolerance and 1e-3 < angle < math.pi - 1e-3:
            return value
    return None


# ---------------------------------------------------------------------------------------------------- parsing
def require_number(value, name, minimum=None, maximum=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
        minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ArgumentError(f"{name} must be a finite number {bounds}, got {value!r}.")


def scalar(value, name: str, hint: str) -> float:
    """One number from a float, an int or a one-element tensor; anything bigger is a batch and is refused."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ArgumentError(
                f"classify_dynamics classifies one trajectory: {name} must be one number, got a tensor of shape "
                f"{tuple(value.shape)}. Pass e.g. {hint}, and call once per trajectory of a batch."
            )
        return float(value.reshape(()))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentError(f"{name} must be a number or a one-element tensor, got {type(value).__name__}.")
    return float(value)


def series(value, name: str) -> torch.Tensor:
    """A 1-D float64 series (sequence or tensor, on its own device) for one trajectory."""
    values = torch.as_tensor(value).detach()
    if values.dim() != 1:
        raise ArgumentError(
            f"{name} must be a 1-D series over time for one trajectory, got shape {tuple(values.shape)}. For a "
            "batch, index one trajectory (e.g. norms[:, i]) and call once per trajectory."
        )
    if values.is_complex():
        raise ArgumentError(f"{name} must be real, got {values.dtype}.")
    return values.to(torch.float64)


def nonfinite_index(value) -> int:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ArgumentError(
                f"nonfinite_step must be one loop index for one trajectory, got shape {tuple(value.shape)}. "
                "Pass lyap.nonfinite_step (unbatched) or lyap.nonfinite_step[i]."
            )
        return int(value.reshape(()))
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"nonfinite_step must be an int loop index or -1, got {value!r}.")
    return value


def complex_values(eigenvalues=None, oscillation=None) -> list[complex] | None:
    """Eigenvalues as Python complex numbers, from a tensor, ``[re, im]`` pairs or complex numbers."""
    if eigenvalues is None:
        return None
    if isinstance(eigenvalues, torch.Tensor):
        if not eigenvalues.is_complex() and eigenvalues.dim() == 2 and eigenvalues.shape[-1] == 2:
            return [complex(float(re), float(im)) for re, im in eigenvalues.tolist()]
        return [complex(v) for v in eigenvalues.reshape(-1).tolist()]
    values = []
    for value in eigenvalues:
        if isinstance(value, (list, tuple)) and len(value) == 2:
            values.append(complex(float(value[0]), float(value[1])))
        else:
            values.append(complex(value))
    return values
