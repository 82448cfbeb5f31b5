"""Trainer callbacks that measure the looped map during training: the largest Lyapunov exponent and the Jacobian's
spectral norm (`LyapunovCallback`), and the pseudo-energy along the loop (`PseudoEnergyCallback`)."""
from __future__ import annotations

import warnings
from typing import Callable

import torch
from transformers import TrainerCallback

from ..dynamics import lyapunov_spectrum, pseudo_energy
from ..errors import ArgumentError, ConvergenceWarning
from ..linalg import spectral_norm
from ..maps import LoopedMap
from .._validation import floating_dtype, nonnegative_int, positive_int

__all__ = ["LyapunovCallback", "PseudoEnergyCallback"]

_HALF = (torch.float16, torch.bfloat16)


def _metric_prefix(metrics) -> str:
    """``eval`` for ``trainer.evaluate()``, or the ``metric_key_prefix`` it was given (read off the metric names)."""
    for key in metrics or ():
        for suffix in ("_runtime", "_loss", "_samples_per_second"):
            if key.endswith(suffix):
                return key[: -len(suffix)]
    return "eval"


class _TrainerAwareCallback(TrainerCallback):
    """Adds its metrics to the evaluation's and logs them through the trainer when it knows it.

    ``on_evaluate`` runs after the Trainer has logged the evaluation metrics, so metrics added there reach the
    reporting integrations (TensorBoard, W&B, ...) only through another ``trainer.log``. `SpectralRegTrainer`
    binds itself to these callbacks; with a plain ``Trainer`` call ``callback.bind(trainer)``. Unbound, the
    metrics still go into the dict ``evaluate()`` returns and into ``state.log_history``.
    """

    def __init__(self, every: int = 1, trainer=None):
        positive_int(every, "every")
        self.every = every
        self.trainer = trainer
        self.evaluations = 0
        self.history: list[dict] = []

    def bind(self, trainer) -> "_TrainerAwareCallback":
        """Log through ``trainer.log`` (so every reporting integration sees the metrics); returns self."""
        self.trainer = trainer
        return self

    def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
        self.evaluations += 1
        if (self.evaluations - 1) % self.every:
            return
        prefix = _metric_prefix(metrics)
        was_training = model.training
        model.eval()
        try:
            values = self.measure(model)
        finally:
            model.train(was_training)
        extra = {f"{prefix}_{name}": value for name, value in values.items()}
        if metrics is not None:
            metrics.update(extra)
        self.history.append({"step": state.global_step, **extra})
        if self.trainer is not None:
            self.trainer.log(dict(extra))
        else:
            state.log_history.append({**extra, "epoch": state.epoch, "step": state.global_step})

    def measure(self, model) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError


def _build_map(model, probe, map_fn) -> LoopedMap:
    if map_fn is not None:
        looped = map_fn(model)
        if not isinstance(looped, LoopedMap):
            raise TypeError(f"map_fn must return a jacobiscope.LoopedMap, got {type(looped).__name__}.")
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
        raise TypeError(f"map_fn must be callable, got {type(map_fn).__name__}.")


class LyapunovCallback(_TrainerAwareCallback):
    """At each evaluation, the largest Lyapunov exponent and the Jacobian spectral norm of the model's looped map
    on a fixed probe batch, logged as evaluation metrics.

    Example::

        >>> import torch, transformers
        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import LyapunovCallback
        >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
        >>> callback = LyapunovCallback(torch.zeros(2, 81, dtype=torch.long), steps=4, transient=2)
        >>> sorted(callback.measure(model))
        ['jacobian_norm', 'jacobian_norm_max', 'lyapunov_max', 'lyapunov_max_stderr', 'lyapunov_max_worst']

    Signature: ``LyapunovCallback(probe=None, *, map_fn=None, steps=32, transient=8, k=1, dtype=None, every=1,
    max_iter=100, trainer=None)``

    Arguments:
        probe: the fixed inputs (``input_ids [N, 81]`` for the Sudoku models), passed to ``model.loop_map(probe)``.
        map_fn: ``map_fn(model) -> LoopedMap`` instead (e.g. ``lambda m: jacobiscope.looped_block(m, probe_ids,
            layer=3, mode="attention")`` for a Hugging Face model); the map's ``x0`` starts the orbit.
        steps, transient, k: of `jacobiscope.lyapunov_spectrum` (``k`` exponents, the largest is summarized).
        dtype: compute dtype (default: the model's; half-precision models in float32).
        every: measure at every ``every``-th evaluation.
        max_iter: Lanczos iteration cap of `jacobiscope.spectral_norm`.
        trainer: log through this trainer (`SpectralRegTrainer` binds itself; see ``bind``).

    Metrics, with the evaluation prefix (``eval_``): ``lyapunov_max`` (mean over the probe trajectories of the
    largest exponent, nats per loop), ``lyapunov_max_worst`` (their maximum), ``lyapunov_max_stderr`` (mean
    standard error), ``jacobian_norm`` / ``jacobian_norm_max`` (``||dF/dX||_2`` at the orbit's final state, mean /
    max over the probe), and ``lyapunov_<i>`` for ``k > 1``. Each process measures the same probe.
    """

    def __init__(self, probe=None, *, map_fn: Callable | None = None, steps: int = 32, transient: int = 8, k: int = 1,
                 dtype: torch.dtype | None = None, every: int = 1, max_iter: int = 100, trainer=None):
        super().__init__(every, trainer)
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
        for index in range(1, exponents.shape[-1]):
            values[f"lyapunov_{index}"] = float(exponents[:, index].mean())
        return values


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

    Signature: ``PseudoEnergyCallback(probe=None, *, map_fn=None, loops=None, every=1, trainer=None)``

    Arguments:
        probe, map_fn: as `LyapunovCallback`; the map must expose a drive (``Y_t``): the Sudoku models' ``loop_map``
            and `jacobiscope.looped_block` in attention mode do.
        loops: loops of the trajectory (default ``model.config.loops``, else 16).

    Metrics (evaluation prefix): ``pseudo_energy_first`` / ``pseudo_energy_last`` (mean over the probe of ``E_0``
    and ``E_{T-1}``), ``pseudo_energy_monotone_fraction`` (the share of loops ``t`` and probe trajectories with
    ``E_{t+1} <= E_t``: 1 for an energy-descending loop). The mean trajectories are kept in ``trajectories``.
    """

    def __init__(self, probe=None, *, map_fn: Callable | None = None, loops: int | None = None, every: int = 1,
                 trainer=None):
        super().__init__(every, trainer)
        _check_probe(probe, map_fn)
        if loops is not None and (isinstance(loops, bool) or not isinstance(loops, int) or loops < 2):
            raise ArgumentError(f"loops must be an int >= 2 (the monotone fraction needs two energies), got {loops!r}.")
        self.probe, self.map_fn, self.loops = probe, map_fn, loops
        self.trajectories: list[list[float]] = []

    def measure(self, model) -> dict[str, float]:
        """The metrics (without prefix) for ``model`` now; appends the mean trajectory to ``trajectories``."""
        looped = _build_map(model, self.probe, self.map_fn).detached()
        if looped.drive_function is None:
            raise TypeError(
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
