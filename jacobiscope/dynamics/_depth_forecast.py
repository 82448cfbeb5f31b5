"""How far past its trained depth a loop can run, forecast from the dynamics up to that depth (no quality labels).

Example::

    >>> import torch
    >>> from jacobiscope.dynamics import forecast_depth
    >>> A = torch.diag(torch.tensor([0.5, 1.05], dtype=torch.float64))   # a fast settling mode, a slow growing one
    >>> step = lambda x: A @ x
    >>> states = [torch.tensor([1.0, 1e-3], dtype=torch.float64)]
    >>> for _ in range(8):
    ...     states.append(step(states[-1]))
    >>> forecast = forecast_depth(step, torch.stack(states), trained_loop=8, horizon=200, threshold=1.0)
    >>> forecast.word, forecast.collapse_loop              # the steps still shrink at loop 8; J says they will grow
    ('drifting', 23)

The rule. Past the trained depth ``T`` the state moves by its steps ``delta_t = x_{t+1} - x_t``, and for small steps
``delta_{t+1} ~ J(x_t) delta_t``. Linearized at the trained-depth state, the future steps are ``J^k delta``
(``delta = x_T - x_{T-1}``, the last measured step) and the displacement from ``x_T`` after ``m`` more loops is
``D(m) = ||sum_{k=1..m} J^k delta|| / ||x_T||`` — one jvp per loop, never a Jacobian; past ``max_products`` loops
the last step is continued geometrically at its measured rate along its direction (exact for one real mode; for a
rotation, whose chord stays bounded, an overestimate: give it the products to reach the horizon). The forecast collapse is the loop at which ``D``
reaches ``threshold`` (a relative RMS displacement: the state has left the one it had at the trained depth), with
the loops at which it reaches half and twice the threshold as its interval. The word:

- ``drifting``: ``D`` reaches the threshold within the horizon;
- ``settling``: it does not, and the steps shrink at least tenfold over the horizon (a fixed point is near);
- ``marginal``: neither: the state keeps moving at about its last step (a rate near 1) without leaving yet.

A linear map is forecast exactly; on a trained model the forecast is first order, and how well it predicts the
measured collapse is validated on models in ``benchmarks/depth_safety.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = ["DepthForecast", "forecast_depth", "DEPTH_WORDS"]

DEPTH_WORDS = ("settling", "marginal", "drifting")
#: the steps must shrink by this factor over the horizon for the loop to be called settling
SETTLED_FACTOR = 0.1


@dataclass
class DepthForecast:
    """The forecast for one trajectory (see the module docstring for the rule).

    Attributes:
        word: ``settling`` / ``marginal`` / ``drifting``.
        trained_loop: ``T``, the last loop whose state the forecast reads.
        horizon: the last loop forecast.
        threshold: the relative displacement from ``x_T`` that counts as leaving the trained-depth state.
        collapse_loop: the first loop at which the forecast displacement reaches ``threshold`` (None: not within
            the horizon); ``collapse_interval``: ``[loop at threshold / 2, loop at 2 x threshold]`` (None entries:
            not within the horizon).
        rate: the forecast steps' growth per forecast step (``period`` loops), late in the propagation (below 1:
            they shrink).
        first_gain: ``||J delta|| / ||delta||``, the one-step gain of the last step (above 1: it is amplified).
        window_rate: the measured step ratio ``(d_T / d_{T-w})^(1/w)`` over the second half of the loops up to
            ``T`` (NaN with fewer than two steps; 0 once the state stops moving exactly).
        last_step: ``||delta|| / ||x_T||``.
        settled_displacement: the displacement the forecast steps add up to when they shrink (``rate < 1``), else
            None.
        displacement: the forecast ``D(m)`` for ``m = 1..`` (at most 512 values, evenly thinned beyond that, with
            ``displacement_loops`` their loops).
        products: the jvps spent (of the ``period``-loop map).
        period: 1, or the cycle length the forecast follows (see `forecast_depth`).
    """

    word: str
    trained_loop: int
    horizon: int
    threshold: float
    collapse_loop: int | None
    collapse_interval: list
    rate: float
    first_gain: float
    window_rate: float
    last_step: float
    settled_displacement: float | None
    displacement: list = field(default_factory=list)
    displacement_loops: list = field(default_factory=list)
    products: int = 0
    judged_on: str = "state"
    state_leave_loop: int | None = None
    state_leave_interval: list = field(default_factory=lambda: [None, None])
    output_threshold: float | None = None
    output_leave_loop: int | None = None
    output_leave_interval: list = field(default_factory=lambda: [None, None])
    output_divergence: list = field(default_factory=list)
    output_horizon: int | None = None
    period: int = 1


#: a period p > 1 is read only when the state returns this much closer after p loops than after one
PERIOD_RETURN = 0.25


def forecast_depth(step, states: torch.Tensor, trained_loop: int, *, horizon: int, threshold: float,
                   readout=None, output_threshold: float = 0.1, max_products: int = 512,
                   max_period: int = 4) -> DepthForecast:
    """Forecast from ``states[: trained_loop + 1]`` (a trajectory ``[n, *state]``; later states are not read).

    ``step`` is the map (a `LoopedMap` or a callable on one state); ``horizon`` > ``trained_loop`` the last loop
    forecast; ``threshold`` > 0; ``max_products`` the most jvps spent before the steps are continued geometrically.

    With a ``readout`` (state -> logits ``[..., classes]``) the readout is also run on each forecast state
    ``x_T + sum_k J^k delta`` (one readout forward per loop): its mean KL divergence from the trained-depth output
    over positions (``output_divergence``); the loop leaves when that reaches ``output_threshold`` (nats), and then
    the output, not the state, decides the word and the collapse loop (``judged_on="output"``): a state that moves
    where the readout does not look (a rotation the output is invariant to) is not a collapse. The output forecast
    stops at ``output_horizon`` (no geometric continuation).

    A loop on a cycle (the state at ``T`` returns to within a quarter of its one-loop step of the state ``p``
    loops earlier, ``p <= max_period``) is forecast with the ``p``-loop map ``F^p`` and its step
    ``x_T - x_{T-p}``, at the loops ``T + p, T + 2p, ...`` (``period``): one loop's linearization cannot follow a
    large-amplitude cycle, whose consecutive states are far apart while the cycle itself is settled.
    """
    _check_arguments(states, trained_loop, horizon, threshold, readout, output_threshold)
    period = _period(states[: trained_loop + 1], max_period)
    if period > 1:
        step = _power(step, period)
    x = states[trained_loop].detach()
    delta = (states[trained_loop] - states[trained_loop - period]).detach()
    scale = float(x.norm())
    last_step = float(delta.norm()) / max(scale, 1e-300)
    window_rate = _window_rate(states[: trained_loop + 1])
    ahead = (horizon - trained_loop) // period
    output = _OutputForecast(readout, x, float(output_threshold)) if readout is not None else None
    if not delta.abs().max() > 0:  # the trained-depth state is an exact fixed point: nothing moves
        forecast = DepthForecast("settling", trained_loop, horizon, float(threshold), None, [None, None], 0.0, 0.0,
                                 window_rate, 0.0, 0.0, [0.0], [trained_loop + period], 0, period=period)
        if output is not None:
            forecast.judged_on, forecast.output_threshold = "output", float(output_threshold)
            forecast.output_divergence, forecast.output_horizon = [0.0], horizon
        return forecast
    total, v, norms, displacement = _propagate(step, x, delta, min(ahead, max_products), threshold, output)
    products = len(norms)
    first_gain = norms[0] / float(delta.norm()) if norms else math.nan
    rate = _late_rate(norms)
    if len(displacement) < ahead and math.isfinite(displacement[-1]) and not (displacement[-1] >= 2 * threshold):
        displacement += _continued(total, v, rate, scale, ahead - len(displacement), 2 * threshold)
    loops = [trained_loop + period * m for m in range(1, len(displacement) + 1)]
    crossing = {level: next((loop for loop, value in zip(loops, displacement) if value >= level), None)
                for level in (threshold / 2, threshold, 2 * threshold)}
    settled = _settled_displacement(total, v, rate, scale) if rate < 1 else None
    decays = rate < 1 and rate ** ahead <= SETTLED_FACTOR
    state_leaves, state_interval = crossing[threshold], [crossing[threshold / 2], crossing[2 * threshold]]
    leaves, interval = state_leaves, state_interval
    if output is not None:
        leaves, interval = output.crossing(trained_loop, period)
    word = "drifting" if leaves is not None else "settling" if decays else "marginal"
    shown_loops, shown = _thin(loops, displacement)
    forecast = DepthForecast(word, trained_loop, horizon, float(threshold), leaves, interval, rate, first_gain,
                             window_rate, last_step, settled, shown, shown_loops, products,
                             state_leave_loop=state_leaves, state_leave_interval=state_interval, period=period)
    if output is not None:
        forecast.judged_on, forecast.output_threshold = "output", float(output_threshold)
        forecast.output_leave_loop, forecast.output_leave_interval = leaves, interval
        forecast.output_divergence = output.divergence
        forecast.output_horizon = trained_loop + period * len(output.divergence)
    return forecast


def _check_arguments(states, trained_loop, horizon, threshold, readout, output_threshold) -> None:
    from ..errors import ArgumentError

    if not isinstance(trained_loop, int) or isinstance(trained_loop, bool) or not 1 <= trained_loop < len(states):
        raise ArgumentError(f"forecast_depth needs trained_loop in [1, {len(states) - 1}] (a measured step before "
                            f"it), got {trained_loop!r} — pass the trained depth of a trajectory that reaches it")
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon <= trained_loop:
        raise ArgumentError(f"forecast_depth needs horizon > trained_loop={trained_loop}, got {horizon!r} — pass "
                            f"e.g. horizon={4 * trained_loop}")
    if not (isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and math.isfinite(threshold)
            and threshold > 0):
        raise ArgumentError(f"forecast_depth needs a finite threshold > 0, got {threshold!r} — pass e.g. 0.5")
    if readout is not None and not callable(readout):
        raise ArgumentError(f"forecast_depth's readout must be a callable state -> logits, got "
                            f"{type(readout).__name__} — pass the map's readout or None")
    if not (isinstance(output_threshold, (int, float)) and not isinstance(output_threshold, bool)
            and math.isfinite(output_threshold) and output_threshold > 0):
        raise ArgumentError(f"forecast_depth needs a finite output_threshold > 0 (nats), got {output_threshold!r} — "
                            "pass e.g. 0.1")


def _propagate(step, x: torch.Tensor, delta: torch.Tensor, count: int, threshold: float, output):
    """Up to ``count`` forecast steps ``v_k = J^k delta`` (one jvp each): ``(sum of the steps, the last step, their
    norms, the relative displacements)``, stopped early once every crossing is known and the steps do not shrink."""
    from ..linalg.operators import jvp

    scale = float(x.norm())
    total = torch.zeros_like(x, dtype=torch.float64)
    norms, displacement = [], []
    v = delta
    with torch.no_grad():
        for _ in range(count):
            v = jvp(step, x, v).detach()
            size = float(v.norm())
            if not math.isfinite(size):  # the linearized steps overflow: the state leaves at once
                norms.append(math.inf)
                displacement.append(math.inf)
                if output is not None:
                    output.overflow()
                break
            total += v.to(torch.float64)
            norms.append(size)
            displacement.append(float(total.norm()) / max(scale, 1e-300))
            if output is not None:
                output.add(total)
            state_known = displacement[-1] >= 2 * threshold
            if state_known and (output is None or output.known()) and size >= float(delta.norm()):
                break  # every crossing is known and the steps are not shrinking: no need to go on
    return total, v, norms, displacement


class _OutputForecast:
    """The readout at the forecast states ``x_T + sum_k v_k`` and its mean KL divergence from the trained-depth
    output over positions: one readout forward per forecast loop. The readout itself, not its linearization: an
    output the readout is invariant to (a rotation it reads only the radius of) stays unchanged."""

    def __init__(self, readout, x: torch.Tensor, threshold: float):
        self.readout, self.x, self.threshold = readout, x, threshold
        self.log_p = torch.log_softmax(self._logits(x), dim=-1)
        self.divergence: list = []

    def _logits(self, state: torch.Tensor) -> torch.Tensor:
        from ..errors import StepError

        try:
            with torch.no_grad():
                logits = self.readout(state)
        except Exception as error:
            raise StepError(f"the readout raised {type(error).__name__} on a forecast state: {error} — fix the "
                            "readout: state -> logits [..., classes]") from error
        if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() < 1:
            raise StepError(f"the readout returned {type(logits).__name__}, expected a float tensor of logits "
                            "[..., classes]")
        return logits.detach().to(torch.float64).reshape(-1, logits.shape[-1])

    def add(self, total: torch.Tensor) -> None:
        log_q = torch.log_softmax(self._logits(self.x + total.to(self.x.dtype)), dim=-1)
        value = float((self.log_p.exp() * (self.log_p - log_q)).sum(-1).mean())
        self.divergence.append(value if math.isfinite(value) else math.inf)

    def overflow(self) -> None:
        self.divergence.append(math.inf)

    def known(self) -> bool:
        return bool(self.divergence) and self.divergence[-1] >= 2 * self.threshold

    def crossing(self, trained_loop: int, period: int = 1) -> tuple[int | None, list]:
        def first(level):
            return next((trained_loop + period * m for m, value in enumerate(self.divergence, 1) if value >= level),
                        None)

        return first(self.threshold), [first(self.threshold / 2), first(2 * self.threshold)]


def _period(states: torch.Tensor, max_period: int) -> int:
    """The smallest p in 2..max_period after which the state at T returns within PERIOD_RETURN of its one-loop
    step (1: none does)."""
    last = states[-1]
    one = float((last - states[-2]).norm())
    if not one > 0:
        return 1
    for p in range(2, min(max_period, len(states) - 1) + 1):
        if float((last - states[-1 - p]).norm()) <= PERIOD_RETURN * one:
            return p
    return 1


def _power(step, p: int):
    from ..maps import LoopedMap

    if isinstance(step, LoopedMap):
        return step.power(p)

    def composed(x):
        for _ in range(p):
            x = step(x)
        return x
    return composed


def _window_rate(states: torch.Tensor) -> float:
    """The measured steps' ratio per loop over the second half of the trajectory (NaN with fewer than 2 steps)."""
    steps = (states[1:] - states[:-1]).reshape(len(states) - 1, -1).norm(dim=-1).to(torch.float64)
    if len(steps) < 2:
        return math.nan
    first = len(steps) // 2 if len(steps) >= 4 else 0
    span = len(steps) - 1 - first
    low, high = float(steps[first]), float(steps[-1])
    if span >= 1 and high == 0:
        return 0.0  # the state stopped moving exactly (a fixed point reached in finitely many loops): nothing is left
    if span < 1 or not low > 0 or not math.isfinite(high):
        return math.nan
    return (high / low) ** (1 / span)


def _late_rate(norms: list) -> float:
    """Growth per loop over the second half of the forecast steps (one step: its own ratio is not known: 1)."""
    if not norms or not math.isfinite(norms[-1]):
        return math.inf
    if len(norms) < 2:
        return 1.0
    start = len(norms) // 2 if len(norms) >= 4 else 0
    low, high = norms[start], norms[-1]
    if not low > 0:
        return 0.0
    return (high / low) ** (1 / (len(norms) - 1 - start))


def _continued(total, v, rate: float, scale: float, count: int, stop: float) -> list:
    """Displacements past the propagated steps: the last step continued at ``rate`` per loop along its direction."""
    size = float(v.norm())
    if not size > 0 or count <= 0:
        return [float(total.norm()) / scale] * max(count, 0)
    direction = (v / size).to(torch.float64)
    powers = torch.arange(1, count + 1, dtype=torch.float64)
    if rate == 1:
        added = size * powers
    else:
        added = size * rate * (torch.pow(torch.tensor(rate, dtype=torch.float64), powers) - 1) / (rate - 1)
    # ||total + a u|| for each added length a, without materializing count states
    along, norm2 = float((total * direction).sum()), float(total.pow(2).sum())
    values = torch.sqrt((norm2 + 2 * along * added + added ** 2).clamp_min(0)) / scale
    values = torch.nan_to_num(values, nan=math.inf, posinf=math.inf)
    beyond = torch.nonzero(values >= stop)
    if len(beyond):  # nothing past twice the threshold is read
        values = values[: int(beyond[0]) + 1]
    return values.tolist()


def _settled_displacement(total, v, rate: float, scale: float) -> float:
    size = float(v.norm())
    if not size > 0:
        return float(total.norm()) / scale
    added = size * rate / (1 - rate)
    direction = (v / size).to(torch.float64)
    return float((total + added * direction).norm()) / scale


def _thin(loops: list, values: list, keep: int = 512) -> tuple[list, list]:
    if len(values) <= keep:
        return loops, values
    picks = sorted({round(i * (len(values) - 1) / (keep - 1)) for i in range(keep)})
    return [loops[i] for i in picks], [values[i] for i in picks]
