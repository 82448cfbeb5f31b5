"""`SpectralRegTrainer`: `transformers.Trainer` with the spectral, Jacobian and energy regularizers added to the loss.

The penalties are computed once per optimizer step (on its first micro-batch) and enter the gradient exactly once,
whatever the gradient accumulation, the number of processes and whether the model normalizes its loss by
``num_items_in_batch``; they are logged through the Trainer's own ``log``; the power-iteration vectors are saved in
each checkpoint folder and restored on resume.
"""
from __future__ import annotations

import logging
import math
import os
import warnings
from collections import defaultdict
from dataclasses import dataclass, field, fields

import torch
from transformers import Trainer, TrainingArguments

from ..errors import ArgumentError
from ._resume_at_end import StopAtMaxStepsMixin
from .regularizers import JacobianRegularizer, SpectralRegularizer, attention_weights, energy_penalty
from .._validation import did_you_mean as _did_you_mean, nonnegative_int, positive_int

__all__ = ["SpectralRegTrainingArguments", "SpectralRegMixin", "SpectralRegTrainer", "SPECTRAL_STATE_NAME"]

logger = logging.getLogger(__name__)

SPECTRAL_STATE_NAME = "spectral_reg_state.safetensors"
_MAX_JACOBIAN_LOOPS = 4096  # loops run (with the graph kept) before every Jacobian penalty


@dataclass
class SpectralRegTrainingArguments(TrainingArguments):
    """`transformers.TrainingArguments` plus the regularizer options of `SpectralRegTrainer`.

    Example::

        >>> from jacobiscope.training import SpectralRegTrainingArguments
        >>> args = SpectralRegTrainingArguments(output_dir="out", spec_reg_weight=1e-3, jacobian_reg_weight=0.1,
        ...                                     report_to=[])
        >>> args.spec_reg_weight, args.jacobian_reg_target, args.energy_reg
        (0.001, 1.0, None)

    Every option is a command-line flag through ``transformers.HfArgumentParser`` (``--spec_reg_weight 1e-3``).
    To combine with another trainer's config (TRL's ``SFTConfig``), inherit from both:
    ``@dataclass class Config(SpectralRegTrainingArguments, SFTConfig): pass``.
    """

    spec_reg_weight: float = field(default=0.0, metadata={
        "help": "Weight of the spectral penalty sum_W (sigma_max(W)^2 - 1)^2 + sum_b ||b||^4 (0: off)."})
    spec_reg_target_modules: list[str] | None = field(default=None, metadata={
        "help": "Module names or glob patterns of the regularized linear maps (default: the looped blocks' "
                "linear maps; fused QKV projections are split into W_Q, W_K, W_V)."})
    spec_reg_exact: bool = field(default=False, metadata={
        "help": "Exact sigma_max (an SVD per weight and step) instead of persistent power iteration."})
    spec_reg_power_iterations: int = field(default=1, metadata={
        "help": "Power iterations per optimizer step (the vectors persist across steps and checkpoints)."})
    spec_reg_include_biases: bool = field(default=True, metadata={"help": "Include the sum_b ||b||_2^4 term."})
    spec_reg_warmup_steps: int = field(default=0, metadata={
        "help": "Ramp every regularizer weight linearly from 0 to its value over this many optimizer steps."})
    spec_reg_log_per_module: bool = field(default=False, metadata={
        "help": "Also log sigma_max of every regularized weight (spectral_norm/<name>), not only max and mean."})
    jacobian_reg_weight: float = field(default=0.0, metadata={
        "help": "Weight of the Jacobian spectral penalty (||dF/dX||_2 - target)^2 at sampled states (0: off)."})
    jacobian_reg_target: float = field(default=1.0, metadata={"help": "Target spectral norm of the loop's Jacobian."})
    jacobian_reg_one_sided: bool = field(default=False, metadata={
        "help": "Penalize only ||dF/dX||_2 above the target."})
    jacobian_reg_iterations: int = field(default=4, metadata={
        "help": "Power iterations (one jvp + one vjp each) before the differentiable step."})
    jacobian_reg_samples: int = field(default=4, metadata={
        "help": "Examples of the step's first micro-batch whose trajectories are sampled."})
    jacobian_reg_max_loops: int | None = field(default=None, metadata={
        "help": "States are taken after t ~ U[0, max_loops] loops (default: config.loops for looped models, 0 for "
                "Hugging Face blocks)."})
    jacobian_reg_layers: list[int] | None = field(default=None, metadata={
        "help": "Hugging Face models: block indices to draw one from at each step (default: all)."})
    jacobian_reg_mode: str = field(default="block", metadata={
        "help": "Hugging Face models: 'block' (the whole layer) or 'attention' (the ItrSA form)."})
    jacobian_reg_every: int = field(default=1, metadata={
        "help": "Apply the Jacobian penalty every n optimizer steps (its weight is not rescaled)."})
    energy_reg: str | None = field(default=None, metadata={
        "help": "Energy regularizer: None, 'e_single' or 'e_multi' (see jacobiscope.training.energy_penalty)."})
    energy_reg_weight: float = field(default=0.0, metadata={"help": "Weight of the energy regularizer."})
    loss_uses_num_items_in_batch: bool | None = field(default=None, metadata={
        "help": "Whether the model's forward normalizes its loss by num_items_in_batch (transformers' GA-correct "
                "loss). None: decide (False for jacobiscope's Sudoku models, which take **kwargs but return a "
                "per-batch mean; transformers' own inference otherwise)."})

    def __post_init__(self):
        super().__post_init__()
        validate_options(self)


_DEFAULTS = {f.name: f.default for f in fields(SpectralRegTrainingArguments)
             if f.name.startswith(("spec_reg_", "jacobian_reg_", "energy_reg")) or f.name == "loss_uses_num_items_in_batch"}


class _Options:
    """The regularizer options read from any ``TrainingArguments`` (defaults where a field is missing)."""

    def __init__(self, args):
        for name, default in _DEFAULTS.items():
            setattr(self, name, getattr(args, name, default))


def validate_options(options) -> None:
    """Check every regularizer option once, before training: types (a bool is not a weight, a string is not a list
    of module names), ranges, finiteness; `ArgumentError` names the option, what came and the fix."""
    for name in ("spec_reg_weight", "jacobian_reg_weight", "energy_reg_weight", "jacobian_reg_target"):
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            example = f"{name}=1.0 (the spectral norm aimed at)" if name == "jacobian_reg_target" else (
                f"{name}=0.01 (0 turns it off)")
            raise ArgumentError(f"{name} must be a finite number >= 0, got {value!r} — pass e.g. {example}.")
    for name in ("spec_reg_exact", "spec_reg_include_biases", "spec_reg_log_per_module", "jacobian_reg_one_sided"):
        value = getattr(options, name)
        if not isinstance(value, bool):
            raise ArgumentError(f"{name} must be True or False, got {value!r} — pass {name}=True or {name}=False.")
    if options.loss_uses_num_items_in_batch is not None and not isinstance(options.loss_uses_num_items_in_batch, bool):
        raise ArgumentError(f"loss_uses_num_items_in_batch must be None, True or False, got "
                            f"{options.loss_uses_num_items_in_batch!r} — pass None to let the trainer decide.")
    modules = options.spec_reg_target_modules
    if modules is not None and (isinstance(modules, (str, bytes)) or not isinstance(modules, (list, tuple))
                                or not modules or not all(isinstance(m, str) and m for m in modules)):
        raise ArgumentError(f"spec_reg_target_modules must be None or a non-empty list of module names or glob "
                            f"patterns, got {modules!r} — pass e.g. ['*.q_proj', '*.k_proj'] (a single name in a list).")
    layers = options.jacobian_reg_layers
    if layers is not None and (isinstance(layers, (str, bytes)) or not isinstance(layers, (list, tuple)) or not layers
                               or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)):
        raise ArgumentError(f"jacobian_reg_layers must be None or a non-empty list of block indices >= 0, got "
                            f"{layers!r} — pass e.g. [0, 3].")
    max_loops = options.jacobian_reg_max_loops
    if max_loops is not None:
        nonnegative_int(max_loops, "jacobian_reg_max_loops")
        if max_loops > _MAX_JACOBIAN_LOOPS:
            raise ArgumentError(f"jacobian_reg_max_loops={max_loops} is over the budget of {_MAX_JACOBIAN_LOOPS} loops "
                                "run before each penalty — pass a smaller value, or None for the model's loops.")
    if options.energy_reg not in (None, "e_single", "e_multi"):
        raise ArgumentError(f"energy_reg must be None, 'e_single' or 'e_multi', got {options.energy_reg!r}"
                            f"{_did_you_mean(options.energy_reg, ('e_single', 'e_multi'))} — pass one of them.")
    if options.energy_reg is not None and options.energy_reg_weight == 0:
        warnings.warn(f"energy_reg={options.energy_reg!r} with energy_reg_weight=0 does nothing.", UserWarning, stacklevel=3)
    if options.jacobian_reg_mode not in ("block", "attention"):
        raise ArgumentError(f"jacobian_reg_mode must be 'block' or 'attention', got {options.jacobian_reg_mode!r}"
                            f"{_did_you_mean(options.jacobian_reg_mode, ('block', 'attention'))} — pass one of them.")
    for name in ("spec_reg_warmup_steps", "spec_reg_power_iterations", "jacobian_reg_iterations"):
        value = getattr(options, name)
        nonnegative_int(value, name)
    for name in ("jacobian_reg_every", "jacobian_reg_samples"):
        value = getattr(options, name)
        positive_int(value, name)


class SpectralRegMixin:
    """Adds the spectral / Jacobian / energy regularizers to any `transformers.Trainer` subclass.

    Example::

        >>> from transformers import Trainer
        >>> from jacobiscope.training import SpectralRegMixin
        >>> class MyTrainer(SpectralRegMixin, Trainer):   # e.g. (SpectralRegMixin, trl.SFTTrainer)
        ...     pass
        >>> [c.__name__ for c in MyTrainer.__mro__[:3]]
        ['MyTrainer', 'SpectralRegMixin', 'Trainer']

    Put the mixin first, so its ``compute_loss`` / ``log`` / checkpoint hooks wrap the trainer's. Options come from
    the ``args`` (`SpectralRegTrainingArguments` fields; an ``args`` object without them leaves every regularizer
    off). Extra keyword arguments: ``spectral_regularizer=`` (a ready `SpectralRegularizer`, weighted by
    ``spec_reg_weight``),
    ``jacobian_regularizer=`` (a `JacobianRegularizer`) and ``jacobian_map_fn=`` (``map_fn(model, inputs) ->
    LoopedMap`` for models the defaults do not cover).

    What it guarantees:

    - **Once per optimizer step.** The penalties are computed on the first micro-batch of each optimizer step and
      enter its gradient exactly once. transformers divides the loss by the accumulation steps only when it
      believes the loss is not already normalized over the whole accumulated batch (``loss_is_scaled_for_ga``,
      ``model_accepts_loss_kwargs`` with ``num_items_in_batch``, ``compute_loss_func``); the mixin applies the same
      test and pre-multiplies its penalty accordingly. Models whose forward takes ``**kwargs`` but returns a
      per-batch mean (the reference Sudoku models) would have their *task* loss scaled wrongly too, so for them the
      mixin sets ``model_accepts_loss_kwargs = False`` (see ``loss_uses_num_items_in_batch``).
    - **Several processes.** Penalties use the unwrapped model (``accelerator.unwrap_model``; ``torch.func`` does
      not pass through DDP), every process computes the same weight penalty from identically seeded vectors, and
      DDP's gradient averaging leaves it counted once. Logged values are averaged over processes.
    - **Mixed precision.** Penalties run outside autocast, in float32 for half-precision weights.
    - **Resume.** The power-iteration vectors are saved as ``spectral_reg_state.safetensors`` in every checkpoint
      folder and loaded with the optimizer state on ``train(resume_from_checkpoint=...)``. The Jacobian draws
      depend only on the seed and the step, so a resumed run draws the same states.

    Logged (train logs, averaged over the steps since the last log): ``spec_penalty``, ``spec_sigma_max``,
    ``spec_sigma_mean`` (and ``spectral_norm/<weight>`` with ``spec_reg_log_per_module``), ``jacobian_penalty``,
    ``jacobian_sigma``, ``energy_penalty`` (unweighted values), ``reg_weight_factor`` (the warm-up ramp). The
    logged ``loss`` includes the weighted penalties.
    FSDP and DeepSpeed ZeRO-3 (sharded weights) are not supported by the weight regularizers.
    """

    _tag_names = ["jacobiscope", "spectral-regularization"]

    def __init__(self, *args, spectral_regularizer: SpectralRegularizer | None = None,
                 jacobian_regularizer: JacobianRegularizer | None = None, jacobian_map_fn=None, **kwargs):
        super().__init__(*args, **kwargs)
        options = _Options(self.args)
        if not isinstance(self.args, SpectralRegTrainingArguments):  # the dataclass validated itself already
            validate_options(options)
        self.spec_options = options
        unwrapped = self.accelerator.unwrap_model(self.model)
        self._configure_loss_kwargs(unwrapped, options)
        self.spectral_regularizer = spectral_regularizer
        self._spec_owned = spectral_regularizer is None  # built here, so rebuilt here if model_init swaps the model
        self._spec_model_id = id(unwrapped)
        if self.spectral_regularizer is None and options.spec_reg_weight > 0:
            self.spectral_regularizer = self._build_spectral_regularizer(unwrapped)
        self.jacobian_regularizer = jacobian_regularizer
        if self.jacobian_regularizer is None and options.jacobian_reg_weight > 0:
            self.jacobian_regularizer = JacobianRegularizer(
                options.jacobian_reg_target, one_sided=options.jacobian_reg_one_sided,
                iterations=options.jacobian_reg_iterations, samples=options.jacobian_reg_samples,
                max_loops=options.jacobian_reg_max_loops, layers=options.jacobian_reg_layers,
                mode=options.jacobian_reg_mode, map_fn=jacobian_map_fn, seed=self.args.seed)
        if options.energy_reg is not None and options.energy_reg_weight > 0:
            attention_weights(unwrapped)  # fail now, with the reason, rather than at the first step
        if hasattr(self.model, "add_model_tags"):
            self.model.add_model_tags(self._tag_names)
        self._spec_metrics: dict[str, list[torch.Tensor]] = defaultdict(list)
        self._spec_reg_done_step: int | None = None
        for callback in self.callback_handler.callbacks:
            self._bind_callback(callback)

    def _bind_callback(self, callback) -> None:
        """Let jacobiscope's monitoring callbacks log through this trainer (so ``report_to`` receives them)."""
        from .callbacks import _TrainerAwareCallback

        if isinstance(callback, _TrainerAwareCallback) and callback.trainer is None:
            callback.trainer = self

    def add_callback(self, callback):
        super().add_callback(callback)
        self._bind_callback(callback)

    def _build_spectral_regularizer(self, unwrapped) -> SpectralRegularizer:
        options = self.spec_options
        return SpectralRegularizer(unwrapped, options.spec_reg_target_modules, exact=options.spec_reg_exact,
                                   power_iterations=max(1, options.spec_reg_power_iterations),
                                   include_biases=options.spec_reg_include_biases, seed=self.args.seed)

    def _current_spectral_regularizer(self, unwrapped) -> SpectralRegularizer | None:
        """The regularizer for the model being trained: ``Trainer(model_init=...)`` builds a new model in
        ``train()``, and the weights of the old one must not be regularized."""
        if self.spectral_regularizer is not None and id(unwrapped) != self._spec_model_id:
            if not self._spec_owned:
                raise ArgumentError(
                    "The trainer's model was replaced (model_init?) but the spectral_regularizer passed in holds the "
                    "old model's weights. Let the trainer build it (spec_reg_weight > 0, no spectral_regularizer=)."
                )
            self.spectral_regularizer = self._build_spectral_regularizer(unwrapped)
            self._spec_model_id = id(unwrapped)
        return self.spectral_regularizer

    # ------------------------------------------------------------------ gradient accumulation
    def _configure_loss_kwargs(self, unwrapped, options) -> None:
        uses = options.loss_uses_num_items_in_batch
        if uses is None and not hasattr(unwrapped, "accepts_loss_kwargs"):
            if type(unwrapped).__module__.startswith("jacobiscope.models."):
                uses = False  # forward(**kwargs) ignores num_items_in_batch and returns a per-batch mean
        if uses is not None:
            self.model_accepts_loss_kwargs = bool(uses)

    def _penalty_loss_scale(self, num_items_in_batch) -> float:
        """What to multiply the penalty by so that, after `training_step`'s own scaling, it counts once per step."""
        if self.loss_is_scaled_for_ga is not None:
            scaled = self.loss_is_scaled_for_ga
        else:  # the test of Trainer.training_step
            scaled = (self.model_accepts_loss_kwargs and num_items_in_batch is not None) or self.compute_loss_func is not None
        if scaled:
            return 1.0
        return float(getattr(self, "current_gradient_accumulation_steps", None) or self.args.gradient_accumulation_steps)

    def regularizer_weight_factor(self, step: int | None = None) -> float:
        """The warm-up ramp ``min(1, step / spec_reg_warmup_steps)`` applied to every regularizer weight."""
        step = self.state.global_step if step is None else step
        warmup = self.spec_options.spec_reg_warmup_steps
        return 1.0 if warmup <= 0 else min(1.0, step / warmup)

    # ------------------------------------------------------------------ the loss
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # The parent may pop labels from `inputs`; the penalty needs the batch as it came.
        batch = dict(inputs) if hasattr(inputs, "keys") else inputs
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        if model.training and torch.is_grad_enabled() and self.state.global_step != self._spec_reg_done_step:
            self._spec_reg_done_step = self.state.global_step
            penalty = self.regularization_penalty(model, batch)
            if penalty is not None:
                loss = loss + (penalty * self._penalty_loss_scale(num_items_in_batch)).to(loss.dtype)
        return (loss, outputs) if return_outputs else loss

    def regularization_penalty(self, model, inputs) -> torch.Tensor | None:
        """The weighted sum of the active penalties for the current step (``None`` when none applies); records
        what it computed for logging."""
        options = self.spec_options
        factor = self.regularizer_weight_factor()
        step = self.state.global_step
        jacobian_due = self.jacobian_regularizer is not None and options.jacobian_reg_weight > 0 \
            and step % options.jacobian_reg_every == 0
        active = (self.spectral_regularizer is not None and options.spec_reg_weight > 0) or jacobian_due \
            or (options.energy_reg is not None and options.energy_reg_weight > 0)
        if factor <= 0 or not active:
            return None
        unwrapped = self.accelerator.unwrap_model(model)
        self._current_spectral_regularizer(unwrapped)
        device = next(unwrapped.parameters()).device
        metrics = self._spec_metrics
        total = None

        def add(term):
            nonlocal total
            total = term if total is None else total + term

        # Penalties in full precision: autocast would run the power iterations in half precision.
        with torch.autocast(device_type=device.type, enabled=False):
            # Metrics are kept as device tensors and turned into numbers only when logged: no sync per step.
            if self.spectral_regularizer is not None and options.spec_reg_weight > 0:
                result = self.spectral_regularizer()
                add(options.spec_reg_weight * factor * result.penalty)
                sigmas = torch.stack([s.float() for s in result.sigmas.values()])
                metrics["spec_penalty"].append(result.penalty.detach())
                metrics["spec_sigma_max"].append(sigmas.max())
                metrics["spec_sigma_mean"].append(sigmas.mean())
                if options.spec_reg_log_per_module:
                    for name, sigma in result.sigmas.items():
                        metrics[f"spectral_norm/{name}"].append(sigma)
            if jacobian_due:
                result = self.jacobian_regularizer(unwrapped, inputs, step=step)
                add(options.jacobian_reg_weight * factor * result.penalty)
                metrics["jacobian_penalty"].append(result.penalty.detach())
                metrics["jacobian_sigma"].append(result.sigma.float().mean())
            if options.energy_reg is not None and options.energy_reg_weight > 0:
                penalty = energy_penalty(unwrapped, options.energy_reg)
                add(options.energy_reg_weight * factor * penalty)
                metrics["energy_penalty"].append(penalty.detach())
        metrics["reg_weight_factor"].append(torch.tensor(factor))
        return total

    # ------------------------------------------------------------------ logging
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self._spec_metrics and "loss" in logs:  # a training log: flush what the steps since the last one recorded
            names = sorted(self._spec_metrics)
            device = self.args.device
            values = torch.stack([torch.stack([v.to(device=device, dtype=torch.float64) for v in self._spec_metrics[n]]).mean()
                                  for n in names])
            if self.accelerator.num_processes > 1:
                values = self.accelerator.gather(values[None]).reshape(-1, len(names)).mean(0)
            logs = {**logs, **{name: float(value) for name, value in zip(names, values.tolist())}}
            self._spec_metrics.clear()
        super().log(logs, start_time)

    # ------------------------------------------------------------------ checkpoints
    def train(self, *args, **kwargs):
        self._spec_reg_done_step = None
        self._spec_metrics.clear()
        return super().train(*args, **kwargs)

    def _save_checkpoint(self, model, trial):
        if self.spectral_regularizer is not None and self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            # Written before the parent writes trainer_state.json, so a checkpoint that looks complete has it.
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            self.spectral_regularizer.save(os.path.join(folder, SPECTRAL_STATE_NAME),
                                           {"global_step": str(self.state.global_step)})
            logger.info("power-iteration state of step %d written to %s", self.state.global_step, folder)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None or self.spectral_regularizer is None:
            return
        self._current_spectral_regularizer(self.accelerator.unwrap_model(self.model))
        path = os.path.join(checkpoint, SPECTRAL_STATE_NAME)
        if os.path.isfile(path):
            self.spectral_regularizer.load(path)
            logger.info("power-iteration state restored from %s", path)
        else:
            warnings.warn(
                f"{checkpoint} has no {SPECTRAL_STATE_NAME} (saved without the spectral regularizer?): the power "
                "iteration restarts from fresh vectors.", UserWarning, stacklevel=2)


class SpectralRegTrainer(SpectralRegMixin, StopAtMaxStepsMixin, Trainer):
    """`transformers.Trainer` with the spectral, Jacobian and energy regularizers of `SpectralRegMixin`.

    Example::

        >>> import contextlib, io, tempfile, torch
        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import SpectralRegTrainer, SpectralRegTrainingArguments
        >>> data = [{"input_ids": torch.zeros(81, dtype=torch.long), "labels": torch.ones(81, dtype=torch.long)}] * 4
        >>> with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        ...     args = SpectralRegTrainingArguments(out, spec_reg_weight=1e-2, jacobian_reg_weight=1e-2, max_steps=1,
        ...                                         per_device_train_batch_size=4, logging_steps=1, save_strategy="no",
        ...                                         report_to=[], use_cpu=True, disable_tqdm=True)
        ...     trainer = SpectralRegTrainer(ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2)),
        ...                                  args, train_dataset=data)
        ...     _ = trainer.train()
        >>> sorted(k for k in trainer.state.log_history[0] if "penalty" in k)
        ['jacobian_penalty', 'spec_penalty']

    Takes the arguments of `transformers.Trainer` (with `SpectralRegTrainingArguments` as ``args``) and the extra
    keywords of `SpectralRegMixin`. For another Trainer subclass (TRL's ``SFTTrainer``), compose:
    ``class MyTrainer(SpectralRegMixin, SFTTrainer)``.
    """
