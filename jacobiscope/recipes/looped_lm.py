"""Train small looped language models of the native transformers families (HRM-Text, Dory, Inkling-2 loop) on the
text tasks of `jacobiscope.data.tasks`, with `transformers.Trainer`: random loop counts per batch (or a fixed
count), EMA weights, exact resume, validation on fresh instances, and folders that plain
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` load offline.

Example::

    >>> from jacobiscope.recipes.looped_lm import LoopedLMRecipe, LOOP_KNOBS
    >>> recipe = LoopedLMRecipe(family="hrm_text", task="addition", loops=4, loops_min=1, loops_max=6)
    >>> recipe.training_loops(), LOOP_KNOBS[recipe.family]
    ((1, 6), 'H_cycles')

A run folder holds ``recipe.json``, ``checkpoint-*`` (the Trainer's, with ``ema.safetensors`` and
``random_streams.json``), ``validation_history.json``, ``best/`` (the best validated weights), ``final/`` and
``final_ema/``, and ``train_summary.json``. Calling `train_looped_lm` again on the same folder resumes from the
newest complete checkpoint and continues bit-exactly (the same batches, loop counts and weight average as an
uninterrupted run); a changed recipe field that cannot apply to a resumed run is refused with the fix.
"""
from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path

import torch
from transformers import Trainer, TrainingArguments

from .._io import atomic_write_text
from ..errors import RecipeError
from ..training._resume_at_end import StopAtMaxStepsMixin
from ._looped_lm_callbacks import HISTORY_FILE, ValidationCallback, exact_match_rate, save_loadable
from ._looped_lm_data import GeneratedTaskDataset, LoopedLMCollator, validation_examples
from ._looped_lm_fields import FAMILIES, LOOPED_LM_FIELDS, WHY_REFUSED
from ._looped_lm_recipe import LOOP_KNOBS, LoopedLMRecipe, build_model, get_loops, model_config, set_loops
from ._sudoku_callbacks import (
    EMACallback, RandomStreamsCallback, TimeBudgetCallback, _declare_checkpoint_format, _latest_checkpoint,
)

__all__ = ["LoopedLMRecipe", "train_looped_lm", "build_model", "model_config", "set_loops", "get_loops",
           "LOOP_KNOBS", "FAMILIES", "LOOPED_LM_FIELDS", "GeneratedTaskDataset", "LoopedLMCollator",
           "validation_examples", "exact_match_rate", "LoopedLMTrainer"]

logger = logging.getLogger(__name__)


class LoopedLMTrainer(StopAtMaxStepsMixin, Trainer):
    """A `Trainer` whose batches carry ``loops``: the model's loop knob is set to it for that forward, then put back
    to the trained depth (so every saved config.json says the trained depth)."""

    trained_loops: int = 1

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loops = inputs.pop("loops", None)
        inputs.setdefault("use_cache", False)   # a training forward needs no key/value cache
        if loops is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        set_loops(model, int(loops))
        try:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            set_loops(model, self.trained_loops)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        # The Trainer reads the checkpoint's config.json with the base PreTrainedConfig only to compare versions,
        # and that base class refuses Dory's serialized layer_types (attention and "mlp" blocks listed apart, which
        # DoryConfig itself reads back fine): load the weights through the model's own class instead (which also
        # undoes the renames its checkpoints are saved with).
        model = self.model if model is None else model
        loaded = type(model).from_pretrained(resume_from_checkpoint, config=copy.deepcopy(model.config))
        model.load_state_dict(loaded.state_dict())


def train_looped_lm(recipe: LoopedLMRecipe, out_dir, *, resume: bool = True, progress: bool = False) -> dict:
    """Train ``recipe`` into the run folder ``out_dir``; resume from its newest complete checkpoint (``resume=False``:
    start over). Returns the summary written to ``train_summary.json``.

    One process trains a folder at a time (a second gets `jacobiscope.FolderBusyError`). A finished run (its
    ``max_steps`` reached) is reported, not trained again; raise ``max_steps`` to go on.
    """
    from .._locks import folder_lock
    from ._sudoku_resume import _run_folder

    if not isinstance(recipe, LoopedLMRecipe):
        raise RecipeError(f"train_looped_lm expected a LoopedLMRecipe, got {type(recipe).__name__} — pass "
                          "LoopedLMRecipe(**fields) or LoopedLMRecipe.from_json('recipe.json')")
    for name, value in (("resume", resume), ("progress", progress)):
        if not isinstance(value, bool):
            raise RecipeError(f"train_looped_lm's {name} must be True or False, got {value!r} — pass {name}=True or "
                              f"{name}=False")
    recipe.validate()
    out = _run_folder(out_dir)
    with folder_lock(out, "trained"):
        return _train(recipe, out, resume=resume, progress=progress)


def _refuse_changes(out_dir: Path, recipe: LoopedLMRecipe) -> list[dict]:
    """The fields that differ from the run's recorded recipe; a change that cannot apply is a `RecipeError`."""
    path = out_dir / "recipe.json"
    if not path.is_file():
        return []
    recorded = json.loads(path.read_text())
    changes = []
    for name, value in recipe.to_dict().items():
        old = recorded.get(name, value)
        policy = LOOPED_LM_FIELDS[name][1]
        if policy == "call" or json.loads(json.dumps(old)) == json.loads(json.dumps(value)):
            continue
        if policy != "apply":
            raise RecipeError(f"recipe field {name} changed from {old!r} to {value!r}, but the run in {str(out_dir)!r}"
                              f" resumes from a checkpoint and {WHY_REFUSED[policy]} — set {name} back to {old!r}, "
                              "or train into a new folder (or pass resume=False to start over)")
        changes.append({"field": name, "old": old, "new": value})
    return changes


def _finished(out_dir: Path, checkpoint: str | None, recipe: LoopedLMRecipe) -> dict | None:
    summary = out_dir / "train_summary.json"
    if checkpoint is None or not summary.is_file() or not (out_dir / "final").is_dir():
        return None
    done = json.loads(summary.read_text())
    target = recipe.target_exact_match
    reached = target is not None and done.get("target_reached") and (done.get("best_exact_match") or 0) >= target
    if done.get("steps", 0) >= recipe.max_steps or reached:
        return dict(done, already_finished=True)
    return None


def _arguments(recipe: LoopedLMRecipe, out_dir: Path, progress: bool) -> TrainingArguments:
    # Sequential sampling: instance i is already an independent random draw, and shuffling the 4M-index pool would
    # cost seconds at every start; a resumed run skips the batches it trained by index.
    return TrainingArguments(
        train_sampling_strategy="sequential",
        output_dir=str(out_dir), per_device_train_batch_size=recipe.batch_size, learning_rate=recipe.learning_rate,
        max_steps=recipe.max_steps, warmup_steps=recipe.warmup_steps, lr_scheduler_type="constant_with_warmup",
        max_grad_norm=recipe.max_grad_norm, weight_decay=recipe.weight_decay, save_steps=recipe.save_steps,
        save_total_limit=2, logging_steps=recipe.logging_steps, seed=recipe.seed,
        use_cpu=not torch.cuda.is_available(), report_to=list(recipe.report_to), remove_unused_columns=False,
        dataloader_num_workers=0, disable_tqdm=not progress, bf16=recipe.bf16)


def _train(recipe: LoopedLMRecipe, out_dir: Path, *, resume: bool, progress: bool) -> dict:
    from ..data.tasks import task_tokenizer

    if recipe.threads is not None:
        torch.set_num_threads(recipe.threads)
    checkpoint = _latest_checkpoint(out_dir, needs_average=recipe.ema_beta > 0) if resume else None
    changes = _refuse_changes(out_dir, recipe) if checkpoint is not None else []
    finished = _finished(out_dir, checkpoint, recipe)
    if finished is not None:
        return finished
    if not resume:
        _clear(out_dir)
    atomic_write_text(out_dir / "recipe.json", json.dumps(recipe.to_dict(), indent=1))
    tokenizer = task_tokenizer()
    torch.manual_seed(recipe.seed)
    model = build_model(recipe)
    ema = EMACallback(recipe.ema_beta, recipe.ema_every, recipe.ema_start) if recipe.ema_beta > 0 else None
    validation = ValidationCallback(recipe, ema, out_dir, tokenizer)
    collator = LoopedLMCollator(recipe)
    streams = RandomStreamsCallback({"loop_counts": collator}, checkpoint)
    collator.after_batch = streams.record
    _declare_checkpoint_format(out_dir, checkpoint)
    (out_dir / "train_summary.json").unlink(missing_ok=True)
    budget = TimeBudgetCallback(recipe.max_seconds) if recipe.max_seconds is not None else None
    # Order matters for a kill mid-save: the small files a resume needs first, the slow validation last.
    callbacks = [c for c in (ema, streams, budget, validation) if c is not None]
    trainer = LoopedLMTrainer(model=model, args=_arguments(recipe, out_dir, progress),
                              train_dataset=GeneratedTaskDataset(recipe), data_collator=collator, callbacks=callbacks)
    trainer.trained_loops = recipe.loops
    validation.bind(trainer)
    if ema is not None:
        ema.resume_from = checkpoint
    if checkpoint is not None:
        logger.info("resuming %s from %s%s", out_dir, checkpoint, f" with changes {changes}" if changes else "")
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=checkpoint)
    seconds = time.perf_counter() - started
    set_loops(model, recipe.loops)
    save_loadable(model, tokenizer, out_dir / "final")
    if ema is not None:
        averaged = copy.deepcopy(model)
        ema.swap_in(averaged)
        save_loadable(averaged, tokenizer, out_dir / "final_ema")
    best = validation.best_record()
    here = result.global_step - streams.start_step
    summary = {"steps": result.global_step, "train_loss": result.training_loss, "seconds": seconds,
               "steps_this_process": here, "steps_per_second": here / max(seconds, 1e-9), "resumed_from": checkpoint,
               "best_step": None if best is None else best["step"],
               "best_exact_match": None if best is None else best["exact_match"],
               "best_harder_exact_match": None if best is None else best["harder_exact_match"],
               "parameters": sum(p.numel() for p in model.parameters()), "recipe_changes": changes,
               "target_reached": validation.reached is not None}
    atomic_write_text(out_dir / "train_summary.json", json.dumps(summary, indent=1))
    logger.info("trained %s to step %d in %.0f s (best exact match %s)", out_dir, result.global_step, seconds,
                summary["best_exact_match"])
    return summary


def _clear(out_dir: Path) -> None:
    """``resume=False``: remove what an earlier run left (checkpoints, best/, final/, histories)."""
    import shutil

    for path in list(out_dir.glob("checkpoint-*")) + [out_dir / n for n in ("best", "final", "final_ema")]:
        shutil.rmtree(path, ignore_errors=True)
    for name in (HISTORY_FILE, "train_summary.json", "checkpoint_format.json"):
        (out_dir / name).unlink(missing_ok=True)
