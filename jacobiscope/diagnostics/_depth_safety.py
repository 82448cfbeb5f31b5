"""Depth safety: is the loop settling, marginal or drifting at its trained depth, and at which loop would it leave?

Example::

    >>> import torch, jacobiscope
    >>> A = torch.diag(torch.tensor([0.5, 1.05], dtype=torch.float64))
    >>> looped = jacobiscope.LoopedMap(lambda x: x @ A)
    >>> looped.info.loops = 8                                           # the trained depth
    >>> row = jacobiscope.measure(looped, torch.tensor([1.0, 1e-3], dtype=torch.float64), loops=32,
    ...                           diagnostics=["depth_safety"], options={"depth_safety_threshold": 1.0})
    >>> result = row.results["depth_safety"]
    >>> result.word, result.collapse_loop, result.measured_collapse_loop   # forecast from loops 0-8; then measured
    ('drifting', 23, 23)

The forecast reads the trajectory up to the trained depth only (`jacobiscope.dynamics.forecast_depth`: the last
step propagated by the Jacobian there); loops measured beyond it are used only to report the displacement that
actually happened beside the forecast, so a run to 4x the trained depth checks its own forecast.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._base import Diagnostic, MeasureContext, Option
from ._result import DiagnosticResult

#: Relative RMS displacement from the trained-depth state that counts as leaving it: set on the calibration models
#: of benchmarks/depth_safety.py (see benchmarks/RESULTS.md, "Depth safety"), tested on the others.
DEFAULT_THRESHOLD = 0.91
DEFAULT_OUTPUT_THRESHOLD = 1.3
DEFAULT_HORIZON_FACTOR = 4


@dataclass
class DepthSafetyMeasurement(DiagnosticResult):
    """The depth forecast of one trajectory (`jacobiscope.dynamics.DepthForecast`), and what was measured.

    ``word`` (settling / marginal / drifting), ``collapse_loop`` (the loop at which the forecast displacement from
    the trained-depth state reaches ``threshold``; None: not within ``horizon``) and ``collapse_interval`` (the
    loops at half and twice the threshold), with the evidence: ``rate`` (forecast steps' growth per loop),
    ``first_gain``, ``window_rate`` (the measured steps' ratio up to the trained depth), ``last_step``,
    ``settled_displacement``. ``trained_loop`` and ``trained_from`` (``"info.loops"``, or ``"last loop"`` when the
    map names no trained depth). When the trajectory ran past the trained depth, ``measured_displacement`` (the
    actual displacement at loops ``trained_loop + 1 ..``) and ``measured_collapse_loop`` (where it reached the
    threshold; None: not within the measured loops) sit beside the forecast.
    """

    word: str
    trained_loop: int
    trained_from: str
    horizon: int
    threshold: float
    collapse_loop: int | None
    collapse_interval: list
    rate: float
    first_gain: float
    window_rate: float
    last_step: float
    settled_displacement: float | None = None
    displacement: list = field(default_factory=list)
    displacement_loops: list = field(default_factory=list)
    measured_displacement: list = field(default_factory=list)
    measured_collapse_loop: int | None = None
    products: int = 0
    judged_on: str = "state"
    state_leave_loop: int | None = None
    state_leave_interval: list = field(default_factory=lambda: [None, None])
    output_threshold: float | None = None
    output_leave_loop: int | None = None
    output_leave_interval: list = field(default_factory=lambda: [None, None])
    output_divergence: list = field(default_factory=list)
    output_horizon: int | None = None
    measured_output_divergence: list = field(default_factory=list)
    measured_output_leave_loop: int | None = None
    period: int = 1

    headers = ("depth", "leaves at")
    glossary = {"depth": ("-", "past the trained depth the loop is settling (a fixed point is near), marginal (it "
                               "keeps moving slowly) or drifting (it leaves the trained-depth state): depth_safety."),
                "leaves at": ("loop", "the loop at which the forecast state is a threshold away from the trained-"
                                      "depth state (> N: not within the horizon N).")}
    panels = 2
    figure_size = (12.0, 4.2)

    def columns(self) -> dict:
        return {"depth": self.word, "leaves at": self.leaves_text()}

    def leaves_text(self) -> str:
        if self.collapse_loop is None:
            return f"> {self.output_horizon if self.judged_on == 'output' else self.horizon}"
        low, high = self.collapse_interval
        return f"{self.collapse_loop} [{low if low is not None else '?'}, {high if high is not None else '>' + str(self.horizon)}]"

    def sentence(self) -> str:
        """One line for the verdicts: the word and the forecast."""
        what = "output" if self.judged_on == "output" else "state"
        if self.trained_from == "last loop":
            # a map that names no trained depth (a block of a model that is not looped): the forecast starts from the
            # last loop measured, and saying "trained depth" would invent one
            head = (f"past loop {self.trained_loop} (the last measured; the map names no trained depth) the loop is "
                    f"{self.word}")
            reference = f"loop-{self.trained_loop} {what}"
        else:
            head = f"past its trained depth ({self.trained_loop}) the loop is {self.word}"
            reference = f"trained-depth {what}"
        if self.collapse_loop is None:
            within = self.output_horizon if self.judged_on == "output" else self.horizon
            return f"{head}: its {what} is not forecast to leave the {reference} within {within} loops"
        return f"{head}: forecast to leave the {reference} at loop {self.leaves_text()}"

    def scalars(self) -> dict:
        low, high = (list(self.collapse_interval) + [None, None])[:2]
        return {"word": self.word, "trained_loop": self.trained_loop, "horizon": self.horizon,
                "threshold": self.threshold, "collapse_loop": self.collapse_loop, "collapse_low": low,
                "collapse_high": high, "rate": self.rate, "first_gain": self.first_gain,
                "window_rate": self.window_rate, "last_step": self.last_step, "judged_on": self.judged_on,
                "state_leave_loop": self.state_leave_loop, "output_leave_loop": self.output_leave_loop,
                "measured_collapse_loop": self.measured_collapse_loop,
                "measured_output_leave_loop": self.measured_output_leave_loop}

    @classmethod
    def draw(cls, axes, entries) -> None:
        """Left: the forecast displacement of the state from the trained-depth state against the loop (solid), the
        measured one (dashed) where the run went past the trained depth, the threshold (dotted). Right: the same for
        the output (mean KL from the trained-depth output) on maps with a readout, which the word is judged on."""
        from .._figures import legend, no_data

        state_ax, output_ax = axes
        drawn = outputs = 0
        for _, result, label, color in entries:
            if result is None or not result.displacement:
                continue
            judged = f"{label}: {result.word}" + (" (judged here)" if result.judged_on == "state" else "")
            _draw_departure(state_ax, result, result.displacement_loops, result.displacement,
                            result.measured_displacement, result.threshold, color, judged)
            drawn += 1
            if result.judged_on == "output" and result.output_divergence:
                ahead = range(1, len(result.output_divergence) + 1)
                loops = [result.trained_loop + result.period * m for m in ahead]
                _draw_departure(output_ax, result, loops, result.output_divergence,
                                result.measured_output_divergence, result.output_threshold, color,
                                f"{label}: {result.word}")
                outputs += 1
        state_ax.set_ylabel("||x_t - x_T|| / ||x_T||")
        state_ax.set_title("state: forecast (solid), measured (dashed)")
        output_ax.set_ylabel("mean KL(p_T || p_t) (nats)")
        output_ax.set_title("output: forecast (solid), measured (dashed)")
        for ax in axes:
            _departure_scale(ax)
            ax.set_xlabel("loop t")
        if not drawn:
            no_data(state_ax, "no depth forecasts in this report")
        if not outputs:
            no_data(output_ax, "no readout: the word is judged on the state")
        legend(state_ax, drawn)
        legend(output_ax, outputs)


class DepthSafety(Diagnostic):
    """Settling / marginal / drifting at the trained depth, and the loop at which the state would leave, forecast
    from the loops up to the trained depth (``info.loops``; the last measured loop when the map names none) by the
    Jacobian there: one jvp per forecast loop (at most ``depth_safety_products``, default 512), no quality labels."""

    name = "depth_safety"
    description = "settling / marginal / drifting at the trained depth, and the loop it would leave at"
    figure_caption = ("Depth safety: the departure from the trained-depth state (left) and output (right, maps with "
                      "a readout) forecast from the loops up to the trained depth (solid), the measured departure "
                      "where the run went further (dashed) and the threshold that names the loop where it leaves "
                      "(dotted); the grey line is the trained depth.")
    result_type = DepthSafetyMeasurement
    default = False
    options = {
        "depth_safety_threshold": Option("positive", DEFAULT_THRESHOLD,
                                         doc="relative displacement from the trained-depth state that counts as "
                                             "leaving it"),
        "depth_safety_output_threshold": Option("positive", DEFAULT_OUTPUT_THRESHOLD,
                                                doc="mean KL (nats) from the trained-depth output that counts as "
                                                    "leaving it (maps with a readout)"),
        "depth_safety_horizon": Option("index", 0, maximum=100_000,
                                       doc="last loop forecast (0: 4x the trained depth)"),
        "depth_safety_products": Option("count", 512, maximum=4096,
                                        doc="most jvps spent; later loops continue the steps geometrically"),
    }

    def cost(self, state_size, loops, options):
        return {"jvp": min(options.get("depth_safety_products", 512), 3 * loops)}

    def compute(self, context: MeasureContext):
        from ..dynamics._depth_forecast import forecast_depth

        options = context.options
        trained, source = self._trained_loop(context)
        if trained is None:
            return None
        horizon = int(options.get("depth_safety_horizon", 0)) or DEFAULT_HORIZON_FACTOR * trained
        if horizon <= trained:
            context.flags.append(f"depth_safety: depth_safety_horizon={horizon} is not past the trained depth "
                                 f"{trained} — forecast to {DEFAULT_HORIZON_FACTOR * trained} instead")
            horizon = DEFAULT_HORIZON_FACTOR * trained
        threshold = float(options.get("depth_safety_threshold", DEFAULT_THRESHOLD))
        states = context.states[: trained + 1].unsqueeze(1)  # the map steps states with their batch axis of one
        readout = _readout(context.looped.info)
        output_threshold = float(options.get("depth_safety_output_threshold", DEFAULT_OUTPUT_THRESHOLD))
        forecast = forecast_depth(context.looped, states, trained, horizon=horizon, threshold=threshold,
                                  readout=readout, output_threshold=output_threshold,
                                  max_products=int(options.get("depth_safety_products", 512)))
        measured, measured_loop = _measured(context, trained, threshold)
        output_measured, output_loop = _measured_output(context, readout, trained, output_threshold)
        # the forecast's own fields, and what was measured past the trained depth beside them
        return DepthSafetyMeasurement(**vars(forecast), trained_from=source, measured_displacement=measured,
                                      measured_collapse_loop=measured_loop,
                                      measured_output_divergence=output_measured,
                                      measured_output_leave_loop=output_loop)

    @staticmethod
    def _trained_loop(context: MeasureContext) -> tuple[int | None, str]:
        info_loops = getattr(context.looped.info, "loops", None)
        usable = isinstance(info_loops, int) and not isinstance(info_loops, bool) and info_loops >= 1
        if usable and info_loops <= context.last_finite:
            return info_loops, "info.loops"
        if usable:
            context.flags.append(f"depth_safety: the trained depth info.loops={info_loops} is beyond the last finite "
                                 f"loop {context.last_finite} — run loops >= {info_loops} to forecast from it; "
                                 "forecast from the last finite loop instead")
        if context.last_finite < 1:
            context.flags.append("depth_safety needs at least one finite step (loops >= 1 with a finite state) — "
                                 "run more loops")
            return None, ""
        return context.last_finite, "last loop"


def _measured(context: MeasureContext, trained: int, threshold: float) -> tuple[list, int | None]:
    """The actual displacement from the trained-depth state at the loops measured past it (up to the last finite)."""
    reference = context.states[trained]
    scale = float(reference.norm()) or 1.0
    return _departure(context, trained, threshold, lambda t: float((context.states[t] - reference).norm()) / scale)


def _measured_output(context: MeasureContext, readout, trained: int, threshold: float) -> tuple[list, int | None]:
    """The actual mean KL from the trained-depth output at the loops measured past it (maps with a readout)."""
    if readout is None:
        return [], None
    from ._loop_depth import readout_logits

    def log_p(t):
        return torch.log_softmax(readout_logits(readout, context.states[t].unsqueeze(0), t), dim=-1)

    with torch.no_grad():
        base = log_p(trained)
        return _departure(context, trained, threshold,
                          lambda t: float((base.exp() * (base - log_p(t))).sum(-1).mean()))


def _departure(context: MeasureContext, trained: int, threshold: float, distance) -> tuple[list, int | None]:
    """``distance(t)`` at the loops past the trained depth up to the last finite one, and the first that reaches
    ``threshold`` (None: none does)."""
    values = [distance(t) for t in range(trained + 1, context.last_finite + 1)]
    return values, next((trained + 1 + i for i, value in enumerate(values) if value >= threshold), None)


def _readout(info):
    """The map's readout on the states the forecast steps (with their batch axis of one), or None."""
    readout = getattr(info, "readout", None)
    if not callable(readout):
        return None
    return (lambda state: readout(state[0])) if info.unbatched_original else readout


def _draw_departure(ax, result, loops, forecast, measured, threshold, color, label) -> None:
    """One row's forecast departure (solid, capped for the log axis), the measured one from the loop after the
    trained depth (dashed), its threshold (dotted) and the trained depth (grey)."""
    ax.plot(loops, [min(v, 1e6) for v in forecast], color=color, label=label)
    if measured:
        start = result.trained_loop + 1
        ax.plot(range(start, start + len(measured)), [min(v, 1e6) for v in measured], color=color, ls="--", lw=1)
    ax.axhline(threshold, color=color, ls=":", lw=1)
    ax.axvline(result.trained_loop, color="0.6", ls=":", lw=1)


def _departure_scale(ax) -> None:
    """Log when every value drawn is positive (departures span decades), else symlog from 0 (an exact fixed point
    departs by 0); never a negative range, as departures are not negative."""
    values = [v for line in ax.get_lines() for v in line.get_ydata() if math.isfinite(v)]
    if values and min(values) > 0:
        ax.set_yscale("log")
    else:
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_ylim(bottom=0)
