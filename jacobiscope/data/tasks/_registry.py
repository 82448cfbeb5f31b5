"""The named tasks: `get_task` and `list_tasks`.

Example::

    >>> from jacobiscope.data.tasks import get_task, list_tasks
    >>> list_tasks()
    ['addition', 'addition5', 'chains', 'chains10', 'chains4q', 'digitsum', 'jumps', 'parity', 'reachability']
    >>> get_task("addition").train_levels
    (0, 4)
"""
from __future__ import annotations

import difflib

from ...errors import ArgumentError
from ._addition import AdditionTask
from ._base import Task
from ._chains import ChainTask
from ._digit_sum import DigitSumTask
from ._jumps import JumpTask
from ._reachability import ReachabilityTask

__all__ = ["get_task", "list_tasks"]

_FACTORIES = {
    "addition": AdditionTask,
    # The size the looped LMs of this package are trained on (CPU budget): 5 digits, chains of 0-2 carries in
    # training, 3-5 held out.
    "addition5": lambda: AdditionTask(digits=5, train_max=2, name="addition5"),
    "reachability": ReachabilityTask,
    # Variable chains (16 variables): 1-4 look-ups in training, 5-12 held out; at most one look-up per loop in a
    # one-layer loop, so the held-out levels need more loops than the trained depth.
    "chains": lambda: ChainTask(variables=16, train_max=4, harder_max=12),
    # A smaller size (CPU budget): 10 variables in 3 chains, 1-3 look-ups in training, 4-8 held out.
    "chains10": lambda: ChainTask(variables=10, train_max=3, harder_max=8, chains=3, name="chains10"),
    # Variable chains with 4 queries per prompt, one on each chain (4x the supervised tokens of "chains"; no answer
    # can be copied from another); the level is the longest-reaching query's look-ups.
    "chains4q": lambda: ChainTask(variables=16, train_max=4, harder_max=12, chains=4, queries=4, name="chains4q"),
    # Jumps (32 cells, 10 letters): 1-4 jumps in training, 5-12 held out; each jump a look 1-3 cells back from where
    # the walk stands, resolved one after another.
    "jumps": lambda: JumpTask(cells=32, train_max=4, harder_max=12, letters=10),
    # Parity of 1-8 bits in training, 9-24 held out, always 24 cells: a running sum carried a cell per pass.
    "parity": lambda: DigitSumTask(cells=24, modulus=2, train_max=8, harder_max=24, name="parity"),
    # The last digit of the sum of 1-6 digits in training, 7-16 held out, always 16 cells.
    "digitsum": lambda: DigitSumTask(cells=16, modulus=10, train_max=6, harder_max=16, name="digitsum"),
}


def list_tasks() -> list[str]:
    """The names `get_task` knows, sorted."""
    return sorted(_FACTORIES)


def get_task(name: str) -> Task:
    """The task called ``name`` (its default size; build `AdditionTask` / `ReachabilityTask` for other sizes).

    Example::

        >>> from jacobiscope.data.tasks import get_task
        >>> get_task("additon")
        Traceback (most recent call last):
        ...
        jacobiscope.errors.ArgumentError: unknown task 'additon' — pass one of ['addition', 'addition5', 'chains', 'chains10', 'chains4q', 'digitsum', 'jumps', 'parity', 'reachability'] (did you mean 'addition'?)
    """
    if isinstance(name, Task):
        return name
    if not isinstance(name, str) or name not in _FACTORIES:
        close = difflib.get_close_matches(str(name), list(_FACTORIES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ArgumentError(f"unknown task {name!r} — pass one of {list_tasks()}{hint}")
    return _FACTORIES[name]()
