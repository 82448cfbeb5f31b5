"""A resumed run whose checkpoint is already at ``max_steps`` trains no further step.

`transformers.Trainer` checks ``max_steps`` only after a step: resumed from the checkpoint of the last step (a run
killed after that save and before its final weights were written), it trains step ``max_steps + 1`` unless
``max_steps`` falls on an epoch boundary — so a resume would not end where the uninterrupted run ends. The mixin
hands the loop no batch once ``max_steps`` is reached, so the Trainer finishes (``on_train_end``, final save) with
the checkpoint's weights.

Example::

    >>> import contextlib, io, pathlib, tempfile, torch
    >>> from transformers import Trainer, TrainingArguments
    >>> from jacobiscope.training import StopAtMaxStepsMixin
    >>> class Model(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.weight = torch.nn.Parameter(torch.ones(1))
    ...     def forward(self, x):
    ...         return {"loss": (self.weight * x).pow(2).mean()}
    >>> class GuardedTrainer(StopAtMaxStepsMixin, Trainer):
    ...     pass
    >>> data = [{"x": torch.ones(1)}] * 4                      # 4 steps per epoch; 3 is not an epoch boundary
    >>> with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
    ...     args = TrainingArguments(out, max_steps=3, per_device_train_batch_size=1, save_steps=3, report_to=[],
    ...                              use_cpu=True, disable_tqdm=True, learning_rate=0.1)
    ...     _ = GuardedTrainer(Model(), args, train_dataset=data).train()
    ...     resumed = GuardedTrainer(Model(), args, train_dataset=data)
    ...     step = resumed.train(resume_from_checkpoint=str(pathlib.Path(out) / "checkpoint-3")).global_step
    >>> step                                                   # a plain Trainer says 4
    3
"""
from __future__ import annotations

__all__ = ["StopAtMaxStepsMixin"]


class StopAtMaxStepsMixin:
    """Put before ``Trainer`` in the bases: ``class MyTrainer(StopAtMaxStepsMixin, Trainer)``."""

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        max_steps = getattr(self.args, "max_steps", -1)
        if max_steps is not None and 0 < max_steps <= self.state.global_step:
            # No batch: the loop's inner step does nothing and the stop flag ends the epoch and the run.
            self.control.should_training_stop = True
            return [], None
        return super().get_batch_samples(epoch_iterator, num_batches, device)
