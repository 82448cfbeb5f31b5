"""Validation of looped-LM training: exact match on fresh generated instances at the validation loop counts, for
the raw and the EMA weights, at every save; the better weights kept as a loadable ``best/`` folder.

Example::

    >>> from jacobiscope.recipes._looped_lm_callbacks import exact_match_rate
    >>> callable(exact_match_rate)
    True
"""
from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from .._io import atomic_write_text
from ._looped_lm_recipe import set_loops

__all__ = ["ValidationCallback", "exact_match_rate", "save_loadable", "HISTORY_FILE", "BEST"]

logger = logging.getLogger(__name__)

HISTORY_FILE = "validation_history.json"
BEST = "best"
BEST_MARKER = "validation.json"


def exact_match_rate(model, batch: dict, loops: int, chunk: int = 256) -> float:
    """The fraction of rows of ``batch`` (`encode`'s output) whose answer is exactly right under teacher forcing
    with ``model`` run at ``loops`` loops (the model's knob is put back afterwards)."""
    from ..data.tasks import exact_match
    from ._looped_lm_recipe import get_loops

    before, was_training = get_loops(model), model.training
    set_loops(model, loops)
    model.eval()
    right = 0
    try:
        with torch.no_grad():
            for start in range(0, batch["input_ids"].shape[0], chunk):
                part = slice(start, start + chunk)
                logits = model(input_ids=batch["input_ids"][part], attention_mask=batch["attention_mask"][part],
                               use_cache=False).logits
                right += int(exact_match(logits, batch["labels"][part]).sum())
    finally:
        set_loops(model, before)
        model.train(was_training)
    return right / batch["input_ids"].shape[0]


def save_loadable(model, tokenizer, folder: Path, marker: dict | None = None) -> None:
    """Write ``model`` and ``tokenizer`` to ``folder`` so `AutoModelForCausalLM` / `AutoTokenizer` load it offline;
    written beside it and swapped in by renames, so a kill leaves the old folder or the new one complete."""
    folder = Path(folder)
    partial, old = folder.with_name(f".{folder.name}.partial"), folder.with_name(f".{folder.name}.old")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    if marker is not None:
        atomic_write_text(partial / BEST_MARKER, json.dumps(marker, indent=1))
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(partial, folder)
    shutil.rmtree(old, ignore_errors=True)


class ValidationCallback(TrainerCallback):
    """At each save: exact match of the raw and the EMA weights on the validation instances (in range, at every
    validation loop count; harder-than-trained at the trained depth and at every validation loop count), appended to
    ``validation_history.json`` and logged; the best at the trained depth is written to ``best/`` (ties: the mean over
    the validation loops of the in-range and the harder instances' exact match — of two checkpoints equally right at
    their depth, the one that goes further past its training; then the later one). Both sets are fresh validation
    instances, never the instances a card is measured on."""

    def __init__(self, recipe, ema, out_dir: Path, tokenizer):
        from ..data.tasks import encode
        from ._looped_lm_data import validation_examples

        self.recipe, self.ema, self.out_dir, self.tokenizer = recipe, ema, Path(out_dir), tokenizer
        self.loops = list(dict.fromkeys(recipe.validation_loops or [recipe.loops]))
        self.in_range = encode(validation_examples(recipe), tokenizer)
        self.harder = encode(validation_examples(recipe, harder=True), tokenizer)
        self.key = {"examples": recipe.validation_examples, "seed": recipe.validation_seed, "task": recipe.task,
                    "loops": self.loops, "trained_depth": recipe.loops}
        path = self.out_dir / HISTORY_FILE
        self.history = json.loads(path.read_text()) if path.is_file() else []
        self.trainer = None
        self.reached: int | None = None   # the step whose validation reached target_exact_match

    def bind(self, trainer) -> "ValidationCallback":
        self.trainer = trainer
        return self

    @staticmethod
    def _score_key(record: dict) -> tuple:
        # The in-range mean alone is no tie-break: at loop counts too few for the longest in-range instances it is a
        # coin flip on them. A record from before the harder per-loop scores existed counts them as 0.
        pooled = (record["exact_match_mean"] + record.get("harder_exact_match_mean", 0.0)) / 2
        return (record["exact_match"], pooled)

    def best_record(self) -> dict | None:
        """The record ``best/`` holds: the highest score, the latest of equals."""
        comparable = [r for r in self.history if r.get("validation") == self.key]
        return max(comparable, key=lambda r: (self._score_key(r), r["step"]), default=None)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        # Records after the resumed step belong to steps this run does again.
        self.history = [r for r in self.history if r["step"] <= state.global_step]

    def on_save(self, args, state, control, model=None, **kwargs):
        candidates = {"raw": copy.deepcopy(model)}
        if self.ema is not None and self.ema.shadow is not None and state.global_step >= self.ema.start:
            candidates["ema"] = copy.deepcopy(model)
            self.ema.swap_in(candidates["ema"])
        scores = {}
        for name, candidate in candidates.items():
            per_loop = {str(t): exact_match_rate(candidate, self.in_range, t) for t in self.loops}
            harder = {str(t): exact_match_rate(candidate, self.harder, t) for t in self.loops}
            scores[name] = {"exact_match": exact_match_rate(candidate, self.in_range, self.recipe.loops),
                            "exact_match_mean": sum(per_loop.values()) / len(per_loop), "per_loop": per_loop,
                            "harder_exact_match": exact_match_rate(candidate, self.harder, self.recipe.loops),
                            "harder_per_loop": harder, "harder_exact_match_mean": sum(harder.values()) / len(harder)}
        winner = max(scores, key=lambda name: self._score_key(scores[name]))
        record = {"step": state.global_step, "weights": winner, **scores[winner], "all": scores,
                  "validation": self.key, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        best = self.best_record()
        self.history.append(record)
        atomic_write_text(self.out_dir / HISTORY_FILE, json.dumps(self.history, indent=1))
        if best is None or self._score_key(record) >= self._score_key(best):
            set_loops(candidates[winner], self.recipe.loops)
            save_loadable(candidates[winner], self.tokenizer, self.out_dir / BEST,
                          {k: record[k] for k in ("step", "weights", "exact_match", "harder_exact_match", "time")})
            logger.info("best/ now holds step %d (%s weights)", state.global_step, winner)
        logger.info("[looped-lm %s] step %d: exact match %.3f at %d loops (%s weights), per loop %s, harder %.3f, "
                    "harder per loop %s", self.recipe.task, state.global_step, record["exact_match"],
                    self.recipe.loops, winner, record["per_loop"], record["harder_exact_match"],
                    record["harder_per_loop"])
        target = self.recipe.target_exact_match
        if target is not None and record["exact_match"] >= target:
            self.reached = state.global_step
            control.should_training_stop = True
            logger.info("target exact match %.3f reached at step %d: training stops", target, state.global_step)
        if self.trainer is not None:
            self.trainer.log({"validation_exact_match": record["exact_match"],
                              "validation_harder_exact_match": record["harder_exact_match"],
                              **{f"validation_exact_match_T{t}": v for t, v in record["per_loop"].items()}})
        return control
