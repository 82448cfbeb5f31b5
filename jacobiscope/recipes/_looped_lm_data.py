"""The data of looped-LM training: an endless-looking dataset of generated task instances (instance i is a pure
function of the seed and i, so a resumed run sees what an uninterrupted one would), the collator that encodes a
batch and draws its loop count, and the fresh validation instances.

Example::

    >>> from jacobiscope.recipes.looped_lm import LoopedLMRecipe, GeneratedTaskDataset, LoopedLMCollator
    >>> recipe = LoopedLMRecipe(task="addition", loops=4, loops_min=2, loops_max=6)
    >>> data = GeneratedTaskDataset(recipe)
    >>> data[5] == data[5], data[5] != data[6]
    (True, True)
    >>> batch = LoopedLMCollator(recipe)([data[0], data[1]])
    >>> sorted(batch), 2 <= batch["loops"] <= 6
    (['attention_mask', 'input_ids', 'labels', 'loops'], True)
"""
from __future__ import annotations

import random

import torch

from ._looped_lm_recipe import LoopedLMRecipe

__all__ = ["GeneratedTaskDataset", "LoopedLMCollator", "validation_examples", "TRAIN_POOL"]

#: How many distinct training instances the dataset indexes (read in order: no instance twice in a run shorter
#: than TRAIN_POOL / batch_size steps). Fixed, not derived from max_steps, so the data stream of a run does not
#: depend on how long it is asked to train.
TRAIN_POOL = 1 << 22


class GeneratedTaskDataset(torch.utils.data.Dataset):
    """Instance ``i`` = ``task.generate(1, levels=levels_at(i), seed=seed * TRAIN_POOL + i)[0]`` (as a dict).

    The levels are the task's train levels, or during the first ``curriculum_steps`` steps (instance ``i`` belongs to
    step ``i // batch_size``: the trainer reads the pool in order) a range that opens one level at a time, from the
    easiest train level alone to all of them: step s draws levels ``low .. low + floor(s * n / curriculum_steps)``
    capped at the hardest (``n`` train levels). A pure function of the index, so a resumed run
    draws what an uninterrupted one would.
    """

    def __init__(self, recipe: LoopedLMRecipe):
        from ..data.tasks import get_task

        self.task = get_task(recipe.task)
        self.seed = recipe.seed
        self.batch_size = recipe.batch_size
        self.curriculum_steps = recipe.curriculum_steps

    def __len__(self) -> int:
        return TRAIN_POOL

    def levels_at(self, index: int) -> tuple[int, int]:
        """The inclusive level range instance ``index`` is drawn from."""
        low, high = self.task.train_levels
        step = int(index) // self.batch_size
        if step >= self.curriculum_steps:
            return low, high
        return low, min(high, low + step * (high - low + 1) // self.curriculum_steps)

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < TRAIN_POOL:
            raise IndexError(f"instance {index} is outside the pool [0, {TRAIN_POOL})")
        levels = self.levels_at(index)
        example = self.task.generate(1, levels=levels, seed=self.seed * TRAIN_POOL + int(index))[0]
        return {"prompt": example.prompt, "answer": example.answer, "level": example.level}


class LoopedLMCollator:
    """Encodes a batch (`jacobiscope.data.tasks.encode`) and draws its loop count uniformly from the recipe's
    training range; ``loops`` rides in the batch and the trainer sets the model's loop knob from it."""

    def __init__(self, recipe: LoopedLMRecipe):
        from ..data.tasks import task_tokenizer

        self.low, self.high = recipe.training_loops()
        self.tokenizer = task_tokenizer()
        self.rng = random.Random(recipe.seed)
        self.after_batch = None  # RandomStreamsCallback.record: the stream's state after each batch, for resume

    def __call__(self, features: list[dict]) -> dict:
        from ..data.tasks import TaskExample, encode

        batch = encode([TaskExample(f["prompt"], f["answer"], int(f["level"])) for f in features], self.tokenizer)
        batch.pop("answer_mask")
        batch["loops"] = self.rng.randint(self.low, self.high) if self.high > self.low else self.low
        if self.after_batch is not None:
            self.after_batch()
        return batch


def validation_examples(recipe: LoopedLMRecipe, harder: bool = False) -> list:
    """The checkpoint-selection instances: fresh ones at the task's train levels (``harder``: its harder levels),
    seeded by ``validation_seed`` — generated, never drawn from the training pool's seeds."""
    from ..data.tasks import get_task

    task = get_task(recipe.task)
    levels = task.harder_levels if harder else task.train_levels
    return task.generate(recipe.validation_examples, levels=levels, seed=recipe.validation_seed + int(harder))
