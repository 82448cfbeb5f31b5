"""Seeded text tasks whose difficulty needs more loops, at a fixed input length: addition with carry chains,
reachability by hops, variable chains,
jumps, digit sums (parity).

Example::

    >>> from jacobiscope.data.tasks import encode, get_task, list_tasks, task_tokenizer
    >>> list_tasks()
    ['addition', 'addition5', 'chains', 'chains10', 'chains4q', 'digitsum', 'jumps', 'parity', 'reachability']
    >>> task = get_task("addition")
    >>> examples = task.generate(4, seed=0)
    >>> all(task.solve(ex.prompt) == ex.answer and task.level_of(ex.prompt) == ex.level for ex in examples)
    True
    >>> harder = task.generate(4, levels=task.harder_levels, seed=0)
    >>> min(ex.level for ex in harder) > task.train_levels[1]
    True
    >>> encode(examples, task_tokenizer())["input_ids"].shape
    torch.Size([4, 29])

Each `Task` has ``name``, ``train_levels`` and ``harder_levels`` (inclusive ranges), ``generate(n, levels=,
seed=)`` (deterministic; levels drawn uniformly), ``solve(prompt)`` (an exact solver independent of the generator)
and ``level_of(prompt)`` (the knob measured on the instance). Harder levels keep the input length: they test depth,
not length generalization. `encode` makes causal-LM tensors; `exact_match` scores teacher-forced logits.
"""
from __future__ import annotations

from ._addition import AdditionTask
from ._base import MAX_EXAMPLES, Task, TaskExample
from ._chains import ChainTask
from ._digit_sum import DigitSumTask
from ._jumps import JumpTask
from ._encode import IGNORE_INDEX, encode, exact_match
from ._reachability import ReachabilityTask
from ._registry import get_task, list_tasks
from ._tokenizer import CHARACTERS, SPECIAL_TOKENS, VOCAB, task_tokenizer

__all__ = [
    "TaskExample",
    "Task",
    "AdditionTask",
    "ReachabilityTask",
    "ChainTask",
    "JumpTask",
    "DigitSumTask",
    "get_task",
    "list_tasks",
    "task_tokenizer",
    "encode",
    "exact_match",
    "IGNORE_INDEX",
    "MAX_EXAMPLES",
    "VOCAB",
    "CHARACTERS",
    "SPECIAL_TOKENS",
]
