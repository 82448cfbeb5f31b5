"""The top-``k`` Lyapunov exponents along the trajectory, with running estimates."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .._values import _finite_or_nan, _is_number, _num
from ._base import Diagnostic, MeasureContext
from ._result import DiagnosticResult, bad, numbers

LYAPUNOV_KEYS = ("exponents", "stderr", "history", "kaplan_yorke")


@dataclass
class LyapunovMeasurement(DiagnosticResult):
    """The top-k Lyapunov exponents (nats per loop, largest first), their standard errors over loops, the running
    estimate after each loop (``history[t][i]``) and the Kaplan-Yorke dimension.

    Example::

        >>> from jacobiscope.diagnostics import LyapunovMeasurement
        >>> result = LyapunovMeasurement([-0.69], [0.001], [[-0.6], [-0.69]], 0.0)
        >>> result.max, result.columns()
        (-0.69, {})

    ``exponents`` are whole-run averages. ``kaplan_yorke`` is NaN when the ``k`` exponents measured still sum to
    ``>= 0``: the dimension is then at least ``k`` (measure with a larger ``k``), not a failed measurement. The summary table, the verdict line and the figures show one lambda_max:
    the verdict's late-half estimate with its 95% interval (the regime's column, `lambda_interval`), so this
    result adds no column of its own.
    """

    exponents: list
    stderr: list
    history: list
    kaplan_yorke: float

    headers = ()
    scalar_names = ("lambda_max", "lambda_max_stderr", "kaplan_yorke")
    glossary = {}
    panels = None  # one panel per row with exponents

    @property
    def max(self) -> float:
        return self.exponents[0] if self.exponents else math.nan

    @property
    def max_stderr(self) -> float:
        return self.stderr[0] if self.stderr else math.nan

    def columns(self) -> dict:
        return {}  # the table's lambda_max is the verdict's (one definition): the regime diagnostic's column

    def scalars(self) -> dict:
        exponents = self.exponents if isinstance(self.exponents, list) else []
        stderr = self.stderr if isinstance(self.stderr, list) else []
        return {"lambda_max": exponents[0] if exponents else None, "lambda_max_stderr": stderr[0] if stderr else None,
                "kaplan_yorke": self.kaplan_yorke}

    def problems(self, name: str) -> list[str]:
        problems = []
        for key in LYAPUNOV_KEYS:
            item = getattr(self, key)
            if key == "kaplan_yorke":
                ok, expected = _is_number(item), "a number"
            elif key == "history":
                ok = isinstance(item, list) and all(numbers(step) for step in item)
                expected = "a list of lists of numbers"
            else:
                ok, expected = numbers(item), "a list of numbers"
            if not ok:
                problems.append(bad(f"{name}[{key!r}]", item, expected))
        return problems

    def relation_problems(self, name: str, row) -> list[str]:
        k = len(self.exponents)
        problems = []
        if len(self.stderr) != k:
            problems.append(f"{name} stderr has {len(self.stderr)} values, expected k = {k}")
        if any(len(step) != k for step in self.history):
            problems.append(f"{name} history rows must each hold k = {k} values")
        return problems

    @classmethod
    def draw(cls, axes, entries) -> None:
        """The running estimate of every exponent against the loop, one panel per row, with the verdict's late
        estimate and its 95% interval."""
        from matplotlib import colormaps

        from .._figures import no_data

        measured = [entry for entry in entries if entry.result is not None and entry.result.history]
        if not measured:
            axes[0].set_title("Lyapunov exponents")
            no_data(axes[0], "no Lyapunov exponents in this report")
        for index, ax in enumerate(axes):
            if index >= len(measured):
                if measured:
                    ax.set_visible(False)
                continue
            _draw_one(ax, measured[index], colormaps["viridis"])


def _draw_one(ax, entry, colormap) -> None:
    from .._figures import points

    row, result, label, _ = entry
    history = [step for step in result.history if isinstance(step, (list, tuple))]
    k = max((len(step) for step in history), default=0)
    loops = list(range(1, len(history) + 1))
    for j in range(k):
        values = _finite_or_nan(step[j] if j < len(step) else None for step in history)
        ax.plot(loops, values, color=colormap(0.85 * j / max(k - 1, 1)), lw=1.2, **points(values),
                label=f"$\\lambda_{{{j + 1}}}$" if k <= 4 else None)
    evidence = row.evidence if isinstance(row.evidence, dict) else {}
    normalized = evidence.get("normalized_lambda_history")
    if isinstance(normalized, list) and normalized:
        # the verdict read the normalized state (a growing residual): its exponent is the one the band shows
        ax.plot(range(1, len(normalized) + 1), _finite_or_nan(normalized), color="tab:red", lw=1.4, ls="--",
                label="$\\lambda_1$, normalized state")
    ax.axhline(0.0, color="0.5", ls=":", lw=1)
    interval = lambda_interval(row)
    if interval is not None and interval[2] is not None and math.isfinite(interval[1]):
        late, width, first, last = interval
        ax.fill_between([first, last], [late - width] * 2, [late + width] * 2, color="tab:orange", alpha=0.25, lw=0,
                        label="lambda_max: late half, 95%")
        ax.plot([first, last], [late, late], color="tab:orange", lw=1)
    ax.set_title(label + _title_number(interval, evidence), fontsize="medium")
    ax.set_xlabel("loop t")
    ax.set_ylabel("running estimate (nats/loop)")
    if k <= 4:
        ax.legend(fontsize="x-small")


def _title_number(interval, evidence) -> str:
    """The verdict's lambda_max under the panel's label (the same number as the table and the verdict line)."""
    if interval is None or not math.isfinite(interval[0]):
        return ""
    late, width, first, last = interval
    text = f"\n$\\lambda_{{max}}$ = {_num(late)}"
    text += f" $\\pm$ {_num(width, '.2g')}" if math.isfinite(width) else ""
    text += f" (loops {first}-{last}, 95%)" if first is not None else ""
    return text + (", normalized state" if evidence.get("judged_on") == "normalized state" else "")


def lambda_interval(row):
    """The one lambda_max: (late-half estimate, 95% half-width, first loop, last loop) from the verdict's evidence;
    for older reports without it, the same estimate from the running history, else the whole-run exponent and its
    standard error (t with 9 degrees of freedom); None when not measured."""
    evidence = row.evidence if isinstance(row.evidence, dict) else {}
    late, width = evidence.get("lambda_late"), evidence.get("lambda_half_width")
    if isinstance(late, (int, float)) and isinstance(width, (int, float)):
        first, _, last = str(evidence.get("lambda_loops", "")).partition("-")
        return late, width, int(first) if first.isdigit() else None, int(last) if last.isdigit() else None
    lyapunov = row.lyapunov if isinstance(row.lyapunov, dict) else {}
    history = [step[0] for step in lyapunov.get("history") or [] if isinstance(step, (list, tuple)) and step]
    if history and all(_is_number(value) and math.isfinite(value) for value in history):
        # an older report without the verdict's numbers: the same definition, from the running estimates
        import torch

        from ..dynamics._regime_evidence import exponent_from_history

        estimate = exponent_from_history(torch.tensor(history, dtype=torch.float64), 1e-6)
        return estimate.value, estimate.half_width, estimate.first_loop, estimate.last_loop
    if lyapunov.get("exponents"):
        stderr = (lyapunov.get("stderr") or [math.nan])[0]
        return lyapunov["exponents"][0], 2.262 * stderr if stderr is not None else math.nan, None, None
    return None


class Lyapunov(Diagnostic):
    """QR/Benettin with ``k`` tangent vectors as vmapped jvps over the ``loops`` loops from ``x0``."""

    name = "lyapunov"
    description = "the top k Lyapunov exponents along the run (QR on vmapped jvps)"
    result_type = LyapunovMeasurement
    listed = True
    column_prefix = ""  # the historic DataFrame names (max_spectral_norm, lambda_max, ...)
    figure_always = True

    def cost(self, state_size, loops, options):
        return {"jvp_block": loops}  # per loop: the k tangents as one vmapped jvp, then a QR

    def compute(self, context: MeasureContext):
        from ..dynamics.lyapunov import lyapunov_spectrum

        count = min(context.options.get("k", 4), context.state_size)
        result = lyapunov_spectrum(context.looped, context.x0, steps=context.loops, k=count,
                                   seed=context.options.get("seed", 0))
        return LyapunovMeasurement(exponents=result.exponents[0].tolist(), stderr=result.stderr[0].tolist(),
                                   history=result.history[:, 0].tolist(), kaplan_yorke=float(result.kaplan_yorke[0]))
