"""Trainer callbacks that measure the looped map during training: the largest Lyapunov exponent and the Jacobian's
spectral norm (`LyapunovCallback`), and the pseudo-energy along the loop (`PseudoEnergyCallback`)."""
from __future__ import annotations

import logging
import warnings
from collections import Counter
from typing import Callable

import torch
from transformers import TrainerCallback

from ..dynamics import lyapunov_spectrum, pseudo_energy
from ..errors import ArgumentError, ArgumentTypeError, ConvergenceWarning
from ..linalg import spectral_norm
from ..maps import LoopedMap
from .._validation import floating_dtype, nonnegative_int, positive_int

__all__ = ["LyapunovCallback", "PseudoEnergyCallback"]

logger = logging.getLogger(__name__)

_HALF = (torch.float16, torch.bfloat16)


def _metric_prefix(metrics) -> str:
    """``eval`` for ``trainer.evaluate()``, or the ``metric_key_prefix`` it was given (read off the metric names)."""
    for key in metrics or ():
        for suffix in ("_runtime", "_loss", "_samples_per_second"):
            if key.endswith(suffix):
                return key[: -len(suffix)]
    return "eval"


class _TrainerAwareCallback(TrainerCallback):
    """Measures at evaluations (and every ``every_steps`` optimizer steps), and logs through the trainer.

    Metrics measured at an evaluation are added to the evaluation's (``eval_`` prefix); those measured during
    training have no prefix. ``on_evaluate`` runs after the Trainer has logged the evaluation metrics, so metrics
    added there reach the reporting integrations (TensorBoard, W&B, ...) only through another ``trainer.log``:
    `SpectralRegTrainer` binds itself to these callbacks; with a plain ``Trainer`` call ``callback.bind(trainer)``.
    Unbound, the metrics still go into the dict ``evaluate()`` returns and into ``state.log_history`` (a warning at
    the start of training says so when ``report_to`` names an integration). A run in which the callback would never
    measure (no evaluation, ``every_steps`` beyond ``max_steps``) is warned about when it starts, with the fix.
    """

    def __init__(self, every: int = 1, trainer=None, every_steps: int | None = None):
        positive_int(every, "every")
        if every_steps is not None:
            positive_int(every_steps, "every_steps")
        self.every, self.every_steps = every, every_steps
        self.trainer = trainer
        self.evaluations = 0
        self.history: list[dict] = []

    def bind(self, trainer) -> "_TrainerAwareCallback":
        """Log through ``trainer.log`` (so every reporting integration sees the metrics); returns self."""
        self.trainer = trainer
        return self

    def on_train_begin(self, args, state, control, **kwargs):
        name = type(self).__name__
        silent = _never_measures(self, args, state)
        if silent is not None:
            warnings.warn(f"{name} will measure nothing in this run: {silent} — pass {name}(..., every_steps=N) with "
                          f"N <= {state.max_steps} to measure every N optimizer steps, or evaluate during training "
                          "(eval_strategy='steps' with eval_steps and an eval_dataset)", UserWarning, stacklevel=2)
        integrations = [str(name) for name in (args.report_to or ()) if name not in ("none", None)]
        if self.trainer is None and integrations:
            warnings.warn(f"{name} is not bound to its Trainer, so its metrics reach trainer.state.log_history but "
                          f"not {', '.join(integrations)} — call callback.bind(trainer) (SpectralRegTrainer binds its "
                          "callbacks itself)", UserWarning, stacklevel=2)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every_steps is not None and model is not None and state.global_step % self.every_steps == 0:
            self._measure_and_log(model, state, "", control=control)

    def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
        self.evaluations += 1
        if (self.evaluations - 1) % self.every:
            return
        self._measure_and_log(model, state, f"{_metric_prefix(metrics)}_", metrics, control)

    def _measure_and_log(self, model, state, prefix: str, metrics: dict | None = None, control=None) -> None:
        was_training = model.training
        model.eval()
        try:
            values = self.measure(model)
        finally:
            model.train(was_training)
        extra = {f"{prefix}{name}": value for name, value in values.items()}
        if metrics is not None:
            metrics.update(extra)
        self.history.append({"step": state.global_step, **extra})
        logger.info("%s at step %d: %s", type(self).__name__, state.global_step,
                    ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()))
        if self.trainer is not None:
            # trainer.log clears control.should_log: the step's own loss log, still to come, would be lost.
            should_log = control is not None and control.should_log
            self.trainer.log(dict(extra))
            if control is not None:
                control.should_log = control.should_log or should_log
        else:
            state.log_history.append({**extra, "epoch": state.epoch, "step": state.global_step})

    def measure(self, model) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError


def _never_measures(callback: _TrainerAwareCallback, args, state) -> str | None:
    """Why ``callback`` will not measure once in the training run about to start, or None when it will."""
    every_steps, start, end = callback.every_steps, state.global_step, state.max_steps
    if every_steps is not None and (start // every_steps + 1) * every_steps <= end:
        return None
    strategy = str(getattr(args.eval_strategy, "value", args.eval_strategy))
    delay = args.eval_delay or 0
    if args.eval_on_start or (strategy == "steps" and delay <= end) or strategy == "epoch":
        return None
    reasons = []
    if strategy == "no":
        reasons.append("it measures at evaluations and eval_strategy is 'no'")
    else:
        reasons.append(f"eval_delay={delay} is beyond max_steps={end}, so no evaluation happens")
    if every_steps is not None:
        reasons.append(f"every_steps={every_steps} has no multiple in steps {start + 1}-{end}")
    return "; ".join(reasons)


def _build_map(model, probe, map_fn) -> LoopedMap:
    if map_fn is not None:
        looped = map_fn(model)
        if not isinstance(looped, LoopedMap):
            raise ArgumentTypeError(f"map_fn must return a jacobiscope.LoopedMap, got {type(looped).__name__}.")
        return looped
    from ..adapters import list_recurrences, native_loop

    # The model's own loop, found the way analyze finds it (the reference solvers, ALBERT, HRM-Text, the protocol).
    if not list_recurrences(model):
        raise ArgumentError(
            f"{type(model).__name__} has no recurrence of its own: pass map_fn=lambda model: jacobiscope.looped_block("
            "model, probe, layer=...) (or any function returning a LoopedMap with x0)."
        )
    device = next(model.parameters()).device
    return native_loop(model, probe.to(device) if isinstance(probe, torch.Tensor) else probe)


def _check_probe(probe, map_fn):
    if probe is None and map_fn is None:
        raise ArgumentError("Give a probe batch (e.g. input_ids [N, 81]) or map_fn(model) -> LoopedMap.")
    if map_fn is not None and not callable(map_fn):
        raise ArgumentTypeError(f"map_fn must be callable, got {type(map_fn).__name__}.")


class LyapunovCallback(_TrainerAwareCallback):
    """At each evaluation (and every ``every_steps`` optimizer steps), the largest Lyapunov exponent, the Jacobian
    spectral norm and the regime of the model's looped map on a fixed probe batch, logged through the Trainer's
    ``log`` (so TensorBoard, W&B and the other ``report_to`` integrations receive them).

    Example::

        >>> import torch, transformers
        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import LyapunovCallback
        >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
        >>> callback = LyapunovCallback(torch.zeros(2, 81, dtype=torch.long), steps=4, transient=2)
        >>> sorted(callback.measure(model))  # doctest: +NORMALIZE_WHITESPACE
        ['jacobian_norm', 'jacobian_norm_max', 'lyapunov_max', 'lyapunov_max_stderr', 'lyapunov_max_worst',
         'regime', 'regime_agreement']

    In a training run: ``Trainer(..., callbacks=[LyapunovCallback(probe, every_steps=100)])`` measures every 100
    optimizer steps (``every_steps=None``, the default, only at evaluations: without ``eval_strategy`` a warning at
    the start of training says the callback will measure nothing, and how to fix it).

    Signature: ``LyapunovCallback(probe=None, *, map_fn=None, steps=32, transient=8, k=1, dtype=None, every=1,
    max_iter=100, trainer=None, every_steps=None)``

    Arguments:
        probe: the fixed inputs (``input_ids [N, 81]`` for the Sudoku models), passed to ``model.loop_map(probe)``.
        map_fn: ``map_fn(model) -> LoopedMap`` instead (e.g. ``lambda m: jacobiscope.looped_block(m, probe_ids,
            layer=3, mode="attention")`` for a Hugging Face model); the map's ``x0`` starts the orbit.
        steps, transient, k: of `jacobiscope.lyapunov_spectrum` (``k`` exponents, the largest is summarized).
        dtype: compute dtype (default: the model's; half-precision models in float32).
        every: measure at every ``every``-th evaluation.
        max_iter: Lanczos iteration cap of `jacobiscope.spectral_norm`.
        trainer: log through this trainer (`SpectralRegTrainer` binds itself; see ``bind``).
        every_steps: also measure every ``every_steps`` optimizer steps during training (metrics without prefix;
            TensorBoard shows them as ``train/lyapunov_max``, ...).

    Metrics, with the evaluation prefix (``eval_``) at an evaluation: ``lyapunov_max`` (mean over the probe
    trajectories of the largest exponent over the ``steps`` loops after the ``transient``, nats per loop),
    ``lyapunov_max_worst`` (their maximum), ``lyapunov_max_stderr`` (mean standard error), ``jacobian_norm`` /
    ``jacobian_norm_max`` (``||dF/dX||_2`` at the orbit's final state, mean / max over the probe), ``regime`` (the
    verdict of `jacobiscope.classify_dynamics` shared by most probe trajectories, each judged on its running exponent
    and its orbit; TensorBoard shows it as text) and ``regime_agreement`` (the share of trajectories with that
    verdict), and ``lyapunov_<i>`` for ``k > 1``. Each process measures the same probe; ``history`` keeps every
    measurement with its step.
    """

    def __init__(self, probe=None, *, map_fn: Callable | None = None, steps: int = 32, transient: int = 8, k: int = 1,
                 dtype: torch.dtype | None = None, every: int = 1, max_iter: int = 100, trainer=None,
                 every_steps: int | None = None):
        super().__init__(every, trainer, every_steps)
        _check_probe(probe, map_fn)
        # checked here, not at the first evaluation hours into training
        positive_int(steps, "steps"), nonnegative_int(transient, "transient"), positive_int(k, "k")
        positive_int(max_iter, "max_iter"), floating_dtype(dtype, "dtype")
        self.probe, self.map_fn = probe, map_fn
        self.steps, self.transient, self.k, self.dtype, self.max_iter = steps, transient, k, dtype, max_iter

    def measure(self, model) -> dict[str, float]:
        """The metrics (without prefix) for ``model`` now."""
        looped = _build_map(model, self.probe, self.map_fn).detached()
        dtype = self.dtype
        if dtype is None:
            dtype = torch.float32 if looped.prepare_state(None).dtype in _HALF else None
        result = lyapunov_spectrum(looped, looped.x0, steps=self.steps, k=self.k, transient=self.transient, dtype=dtype)
        exponents = result.exponents.reshape(-1, result.exponents.shape[-1]).double()  # [trajectories, k]
        final = result.final_state
        measured = looped.to(dtype=dtype) if dtype is not None and dtype != final.dtype else looped
        with warnings.catch_warnings():
            # A loose estimate is still a useful monitor; the Lanczos tolerance is reported by spectral_norm itself.
            warnings.simplefilter("ignore", ConvergenceWarning)
            norm = spectral_norm(measured, final.to(dtype) if dtype is not None else final, max_iter=self.max_iter)
        norms = norm.value.reshape(-1).double()
        values = {
            "lyapunov_max": float(exponents[:, 0].mean()),
            "lyapunov_max_worst": float(exponents[:, 0].max()),
            "lyapunov_max_stderr": float(result.stderr.reshape(-1, exponents.shape[-1])[:, 0].double().mean()),
            "jacobian_norm": float(norms.mean()),
            "jacobian_norm_max": float(norms.max()),
        }
        values["regime"], values["regime_agreement"] = _regime(measured, result, self.transient + self.steps)
        for index in range(1, exponents.shape[-1]):
            values[f"lyapunov_{index}"] = float(exponents[:, index].mean())
        return values


def _regime(looped: LoopedMap, result, loops: int) -> tuple[str, float]:
    """The verdict most probe trajectories get from `classify_dynamics` (each on its running exponent and its own
    orbit of ``loops`` loops from ``x0``) and the share of trajectories that get it."""
    from ..dynamics.regime import classify_dynamics

    x0 = looped.prepare_state(None)  # in the dtype the exponents were computed in
    with torch.no_grad():
        states = looped.trajectory(x0, steps=loops)  # [T+1, *batch, *state]
    count = looped.batch_shape(x0).numel()
    states = states.reshape(states.shape[0], count, *states.shape[1 + looped.batch_dims:])
    history = result.history[..., 0].reshape(result.history.shape[0], count)
    verdicts = Counter(str(classify_dynamics(lyapunov_history=history[:, index], states=states[:, index]).regime)
                       for index in range(count))
    regime, agreeing = verdicts.most_common(1)[0]
    return regime, agreeing / count


class PseudoEnergyCallback(_TrainerAwareCallback):
    """At each evaluation, the pseudo-energy ``E_t = -Tr(X_t^T Y_t)`` along the loop on a fixed probe batch: its first
    and last values and the fraction of loops where it did not increase.

    Example::

        >>> import torch
        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import PseudoEnergyCallback
        >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=3))
        >>> values = PseudoEnergyCallback(torch.zeros(2, 81, dtype=torch.long)).measure(model)
        >>> sorted(values), 0.0 <= values["pseudo_energy_monotone_fraction"] <= 1.0
        (['pseudo_energy_first', 'pseudo_energy_last', 'pseudo_energy_monotone_fraction'], True)

    Signature: ``PseudoEnergyCallback(probe=None, *, map_fn=None, loops=None, every=1, trainer=None,
    every_steps=None)``

    Arguments:
        probe, map_fn: as `LyapunovCallback`; the map must expose a drive (``Y_t``): the Sudoku models' ``loop_map``
            and `jacobiscope.looped_block` in attention mode do.
        loops: loops of the trajectory (default ``model.config.loops``, else 16).
        every, trainer, every_steps: as `LyapunovCallback` (when to measure, where to log).

    Metrics (evaluation prefix): ``pseudo_energy_first`` / ``pseudo_energy_last`` (mean over the probe of ``E_0``
    and ``E_{T-1}``), ``pseudo_energy_monotone_fraction`` (the share of loops ``t`` and probe trajectories with
    ``E_{t+1} <= E_t``: 1 for an energy-descending loop). The mean trajectories are kept in ``trajectories``.
    """

    def __init__(self, probe=None, *, map_fn: Callable | None = None, loops: int | None = None, every: int = 1,
                 trainer=None, every_steps: int | None = None):
        super().__init__(every, trainer, every_steps)
        _check_probe(probe, map_fn)
        if loops is not None and (isinstance(loops, bool) or not isinstance(loops, int) or loops < 2):
            raise ArgumentError(f"loops must be an int >= 2 (the monotone fraction needs two energies), got {loops!r}.")
        self.probe, self.map_fn, self.loops = probe, map_fn, loops
        self.trajectories: list[list[float]] = []

    def measure(self, model) -> dict[str, float]:
        """The metrics (without prefix) for ``model`` now; appends the mean trajectory to ``trajectories``."""
        looped = _build_map(model, self.probe, self.map_fn).detached()
        if looped.drive_function is None:
            raise ArgumentTypeError(
                f"The map '{looped.name}' exposes no drive Y_t, so its pseudo-energy -Tr(X^T Y) is undefined. Use a "
                "model whose loop_map has one, looped_block(..., mode='attention'), or a map_fn whose LoopedMap has drive=."
            )
        loops = self.loops or int(getattr(getattr(model, "config", None), "loops", 0) or 16)
        loops = max(loops, 2)
        with torch.no_grad():
            states = looped.trajectory(looped.x0, steps=loops)
            energies = pseudo_energy(states[:-1], looped).double()  # [T, *batch]
        energies = energies.reshape(energies.shape[0], -1)
        self.trajectories.append(energies.mean(1).tolist())
        return {
            "pseudo_energy_first": float(energies[0].mean()),
            "pseudo_energy_last": float(energies[-1].mean()),
            "pseudo_energy_monotone_fraction": float((energies[1:] <= energies[:-1]).double().mean()),
        }
