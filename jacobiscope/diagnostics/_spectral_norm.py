"""``||J||_2`` at evenly sampled loops (Lanczos on ``J^T J`` through jvps and vjps)."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from .._values import _finite_or_nan, _is_number
from ..errors import ConvergenceWarning
from ._base import Diagnostic, MeasureContext, Option
from ._result import DiagnosticResult, bad, is_int


def sample_loops(loops: int, samples: int) -> list[int]:
    """``samples`` loops evenly spaced over ``0..loops``, both ends included.

    Example::

        >>> from jacobiscope.diagnostics._spectral_norm import sample_loops
        >>> sample_loops(32, 3)
        [0, 16, 32]
    """
    if samples <= 0:
        return []
    if samples == 1:
        return [loops]
    return sorted({round(i * loops / (samples - 1)) for i in range(samples)})


@dataclass
class SpectralNormMeasurement(DiagnosticResult):
    """``||J||_2`` at sampled loops: ``samples`` is ``[{"loop": t, "value": sigma, "tolerance": tol}, ...]``.

    Example::

        >>> from jacobiscope.diagnostics import SpectralNormMeasurement
        >>> result = SpectralNormMeasurement([{"loop": 0, "value": 1.2, "tolerance": 1e-6},
        ...                                   {"loop": 8, "value": 0.8, "tolerance": 1e-6}])
        >>> result.max, result.scalars()["max_spectral_norm_loop"], result.columns()
        (1.2, 0, {'max ||J||2': 1.2})
    """

    samples: list = field(default_factory=list)

    headers = ("max ||J||2",)
    scalar_names = ("max_spectral_norm", "max_spectral_norm_loop", "final_spectral_norm")
    glossary = {"max ||J||2": ("-", "largest spectral norm of the loop's Jacobian J = dF/dX over the sampled loops: "
                                    "how much one loop can stretch a perturbation at most (above 1: some direction "
                                    "grows).")}
    panels = 3
    figure_size = (14.0, 4.2)

    @property
    def loops(self) -> list[int]:
        return [sample["loop"] for sample in self.samples]

    @property
    def values(self) -> list[float]:
        return [sample["value"] for sample in self.samples]

    @property
    def max(self) -> float:
        """The largest finite sampled norm (NaN when none is finite)."""
        finite = [v for v in self.values if _is_number(v) and math.isfinite(v)]
        return max(finite) if finite else math.nan

    def columns(self) -> dict:
        return {"max ||J||2": self.scalars()["max_spectral_norm"]}

    def scalars(self) -> dict:
        samples = [(e.get("loop"), e.get("value")) for e in self.samples if isinstance(e, dict)]
        samples = [(loop, value) for loop, value in samples if _is_number(value)]
        finite = [(loop, value) for loop, value in samples if not math.isnan(value)]
        if finite:
            max_loop, max_value = max(finite, key=lambda item: item[1])
        else:
            max_loop, max_value = None, (math.nan if samples else None)
        return {"max_spectral_norm": max_value, "max_spectral_norm_loop": max_loop,
                "final_spectral_norm": samples[-1][1] if samples else None}

    def problems(self, name: str) -> list[str]:
        if not isinstance(self.samples, list):
            return [bad(name, self.samples, "a list of {'loop', 'value', 'tolerance'} objects")]
        return [bad(f"{name}[{i}]", entry, "{'loop': int, 'value': number, 'tolerance': number}")
                for i, entry in enumerate(self.samples)
                if not isinstance(entry, dict) or not is_int(entry.get("loop")) or not _is_number(entry.get("value"))
                or not _is_number(entry.get("tolerance", 0.0))]

    def relation_problems(self, name: str, row) -> list[str]:
        problems = []
        for i, entry in enumerate(self.samples):
            if not {"loop", "value", "tolerance"} <= set(entry):
                problems.append(f"{name}[{i}] is {entry!r}, expected {{'loop': t, 'value': v, 'tolerance': tol}}")
            elif not 0 <= entry["loop"] <= row.loops:
                problems.append(f"{name}[{i}]['loop'] is {entry['loop']!r}, expected an int in 0..{row.loops}")
        return problems

    @classmethod
    def draw(cls, axes, entries) -> None:
        """``||J||_2`` at the sampled loops, the state norm and the relative step, against the loop."""
        from .._figures import auto_log, legend, no_data, points

        ax_sigma, ax_state, ax_step = axes
        sigma_series, state_series, step_series = [], [], []
        for row, result, label, color in entries:
            samples = [e for e in (result.samples if result else []) if isinstance(e, dict) and "loop" in e]
            if samples:
                values = _finite_or_nan(e.get("value") for e in samples)
                ax_sigma.plot([e["loop"] for e in samples], values, marker="o", ms=3, color=color, label=label)
                sigma_series.append(values)
            for ax, series, trajectory in ((ax_state, state_series, row.state_norm),
                                           (ax_step, step_series, row.step_size)):
                if trajectory:
                    values = _finite_or_nan(trajectory)
                    ax.plot(range(len(values)), values, color=color, label=label, **points(values))
                    series.append(values)
        ax_sigma.axhline(1.0, color="0.5", ls=":", lw=1)
        for ax, series, title, ylabel in (
            (ax_sigma, sigma_series, "Jacobian spectral norm", "$\\|J\\|_2$"),
            (ax_state, state_series, "state norm (RMS per token)", "$\\|X_t\\|$"),
            (ax_step, step_series, "relative step", "$\\|X_{t+1}-X_t\\| / \\|X_t\\|$"),
        ):
            ax.set_title(title)
            ax.set_xlabel("loop t")
            ax.set_ylabel(ylabel)
            auto_log(ax, series)
            if not series:
                no_data(ax, "not measured")
        legend(ax_step, len(entries))


class SpectralNorm(Diagnostic):
    """The Jacobian's spectral norm ``||dF/dX||_2`` at ``spectral_samples`` loops of the trajectory."""

    name = "spectral_norm"
    description = "||J||_2 of the step at spectral_samples loops (Lanczos on jvp/vjp)"
    result_type = SpectralNormMeasurement
    figure_name = "norms"
    listed = True
    column_prefix = ""  # the historic DataFrame names (max_spectral_norm, lambda_max, ...)
    figure_always = True

    options = {
        "spectral_max_iter": Option("count", 100, maximum=100_000,
                                    doc="Lanczos iterations per sampled loop before ||J||_2 is flagged not converged"),
    }

    def cost(self, state_size, loops, options):
        # ~12 Lanczos steps per sampled loop at tol 1e-3 (8-14 measured on GPT-2, BERT and ItrSA blocks)
        steps = options.get("spectral_samples", 3) * 12
        return {"jvp": steps, "vjp": steps}

    def compute(self, context: MeasureContext):
        from ..linalg.svd import spectral_norm

        values = []
        max_iter = int(context.options.get("spectral_max_iter", 100))
        for loop in sample_loops(context.last_finite, context.options.get("spectral_samples", 3)):
            # A Ritz value is a lower bound; sigma_max^2 lies within tolerance * value^2 of value^2 (the stored
            # tolerance). The error is about residual^2 / gap: ~1e-6 for a separated sigma_max, ~2e-5 relative on
            # tiny HF blocks whose top singular values cluster (tests/test_diagnostics_matrix.py checks the bound).
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                result = spectral_norm(context.looped, context.states[loop : loop + 1], tol=1e-3,
                                       max_iter=max_iter, seed=context.options.get("seed", 0))
            _rewarn(caught, loop, max_iter)
            values.append({"loop": loop, "value": float(result.value[0]), "tolerance": float(result.tolerance[0])})
        return SpectralNormMeasurement(samples=values)


def _rewarn(caught, loop: int, max_iter: int) -> None:
    """Pass the solver's warnings on; a convergence warning becomes one sentence (the row's flag) that names the
    option the user has, instead of the linear-algebra call's own ``max_iter``."""
    for warning in caught:
        if issubclass(warning.category, ConvergenceWarning):
            residual = str(warning.message).partition("relative residual ")[2].split(" ")[0] or "?"
            warnings.warn(f"||J||_2 at loop {loop} stopped after {max_iter} Lanczos iterations (relative residual "
                          f"{residual} > tol 1e-3) — raise spectral_max_iter (--option spectral_max_iter=N)",
                          ConvergenceWarning, stacklevel=2)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
