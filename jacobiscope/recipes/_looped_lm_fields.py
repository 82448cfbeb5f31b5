"""The fields of a looped-LM recipe: each one's check (type, range, budget) and what a change does to a resumed run.

Example::

    >>> from jacobiscope.recipes._looped_lm_fields import LOOPED_LM_FIELDS
    >>> check, on_resume = LOOPED_LM_FIELDS["family"]
    >>> check("family", "dory"), on_resume
    ('dory', 'model')
    >>> check("family", "hrm-text")
    Traceback (most recent call last):
    ...
    jacobiscope.errors.RecipeError: recipe field family must be 'hrm_text' or 'dory' or 'inkling2_loop', got 'hrm-text' — did you mean 'hrm_text'?
"""
from __future__ import annotations

from ._sudoku_fields import (
    MAX_BATCH_SIZE, MAX_SEED, MAX_STEPS, _bool_field, _choice_field, _extra_field, _fail, _float_field, _int_field,
    _report_to_field,
)

__all__ = ["LOOPED_LM_FIELDS", "FAMILIES", "MAX_LM_LOOPS", "MAX_LM_HIDDEN", "MAX_VALIDATION_EXAMPLES"]

FAMILIES = ("hrm_text", "dory", "inkling2_loop")
# Budgets: a recipe asking for more is refused before any work (these models train on CPU in minutes to hours).
MAX_LM_LOOPS = 256
MAX_LM_HIDDEN = 4096
MAX_VALIDATION_EXAMPLES = 100_000
_LOOPS_WHY = "every training step runs this many loops of the looped stack"


def _task_field(name, value):
    from ..data.tasks import list_tasks

    known = list_tasks()
    return _choice_field(*known)(name, value)


def _loops_list_field(name, value):
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 64:
        _fail(name, value, "null or a list of 1 to 64 loop counts", f"set {name} to e.g. [2, 4, 8]")
    return [_int_field(1, MAX_LM_LOOPS, budget=_LOOPS_WHY)(f"{name}[{i}]", v) for i, v in enumerate(value)]


# What a changed value does to a run that resumes (compared with the run's recipe.json):
#   "model"/"start"/"data"/"restored": refused (another model, read only at the start, another data stream, or
#   overridden by the restored optimizer); "apply": applied from the resumed step on; "call": holds for this call only
#   (a wall-clock budget: each resume brings its own, so it is not compared).
LOOPED_LM_FIELDS: dict = {
    "family": (_choice_field(*FAMILIES), "model"),
    "task": (_task_field, "data"),
    "hidden_size": (_int_field(8, MAX_LM_HIDDEN, budget="memory and time per token"), "model"),
    "intermediate_size": (_int_field(8, 4 * MAX_LM_HIDDEN), "model"),
    "num_heads": (_int_field(1, 64), "model"),
    "num_layers": (_int_field(1, 16), "model"),
    "inner_loops": (_int_field(1, 16), "model"),
    "num_experts": (_int_field(1, 64), "model"),
    "experts_per_token": (_int_field(1, 64), "model"),
    "attention_window": (_int_field(1, 4096, optional=True), "model"),
    "loops": (_int_field(1, MAX_LM_LOOPS, budget=_LOOPS_WHY), "apply"),
    "loops_min": (_int_field(1, MAX_LM_LOOPS, optional=True, budget=_LOOPS_WHY), "data"),
    "loops_max": (_int_field(1, MAX_LM_LOOPS, optional=True, budget=_LOOPS_WHY), "data"),
    "learning_rate": (_float_field(0.0, 10.0, low_open=True), "restored"),
    "batch_size": (_int_field(1, MAX_BATCH_SIZE, budget="memory per step"), "data"),
    "curriculum_steps": (_int_field(0, MAX_STEPS), "data"),
    "max_steps": (_int_field(1, MAX_STEPS), "apply"),
    "warmup_steps": (_int_field(0, MAX_STEPS), "restored"),
    "max_grad_norm": (_float_field(0.0, 1e6), "apply"),
    "weight_decay": (_float_field(0.0, 1.0), "restored"),
    "ema_beta": (_float_field(0.0, 1.0, high_open=True), "apply"),
    "ema_every": (_int_field(1, MAX_STEPS), "apply"),
    "ema_start": (_int_field(0, MAX_STEPS), "apply"),
    "seed": (_int_field(0, MAX_SEED), "start"),
    "validation_examples": (_int_field(1, MAX_VALIDATION_EXAMPLES, budget="scored at every save"), "apply"),
    "validation_seed": (_int_field(0, MAX_SEED), "apply"),
    "validation_loops": (_loops_list_field, "apply"),
    "save_steps": (_int_field(1, MAX_STEPS), "apply"),
    "logging_steps": (_int_field(1, MAX_STEPS), "apply"),
    "max_seconds": (_float_field(0.0, 1e9, optional=True), "call"),
    "target_exact_match": (_float_field(0.0, 1.0, low_open=True, optional=True), "apply"),
    "threads": (_int_field(1, 1024, optional=True), "apply"),
    "report_to": (_report_to_field, "apply"),
    "extra": (_extra_field, "apply"),
    "bf16": (_bool_field, "apply"),
}

WHY_REFUSED = {"model": "the checkpoint's weights were trained with the recorded value (another shape or model)",
               "start": "it is read only when a run starts, so a resumed run cannot apply it",
               "data": "the resumed run would draw other batches than the recorded run",
               "restored": "the optimizer and scheduler state restored from the checkpoint keep the recorded value"}
