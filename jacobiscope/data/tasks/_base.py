"""What every text task shares: the example record, the argument checks and the seeded level draw.

Example::

    >>> from jacobiscope.data.tasks import TaskExample
    >>> ex = TaskExample(prompt="01+02=", answer="003", level=0)
    >>> ex.prompt + ex.answer
    '01+02=003'
"""
from __future__ import annotations

import dataclasses
import operator
import random

from ..._validation import _is_int, seed_int
from ...errors import ArgumentError

__all__ = ["TaskExample", "Task", "MAX_EXAMPLES"]

MAX_EXAMPLES = 10_000_000   # one generate() call; more is almost surely a typo (and hours of Python)


@dataclasses.dataclass(frozen=True)
class TaskExample:
    """One instance of a text task: ``prompt + answer`` is the full text, ``level`` its difficulty knob.

    Example::

        >>> from jacobiscope.data.tasks import get_task
        >>> ex = get_task("addition").generate(1, seed=3)[0]
        >>> len(ex.prompt), len(ex.answer), get_task("addition").solve(ex.prompt) == ex.answer
        (18, 9, True)
    """

    prompt: str
    answer: str
    level: int


class Task:
    """A text task: seeded generator, exact solver and the difficulty measured on an instance.

    Subclasses set `name`, `train_levels`, `harder_levels` and implement ``_make(level, rng)``, `solve` and
    `level_of`. ``generate(n, levels=..., seed=...)`` draws each example's level uniformly over the inclusive range
    and builds an instance of exactly that level (checked against `level_of` by the tests).

    Example::

        >>> from jacobiscope.data.tasks import get_task
        >>> task = get_task("addition")
        >>> task.supported_levels
        (0, 8)
    """

    name: str = ""
    train_levels: tuple[int, int] = (0, 0)
    harder_levels: tuple[int, int] = (0, 0)

    @property
    def supported_levels(self) -> tuple[int, int]:
        """The inclusive range of levels this task can generate (train and harder levels together)."""
        return (min(self.train_levels[0], self.harder_levels[0]), max(self.train_levels[1], self.harder_levels[1]))

    def generate(self, n: int, *, levels=None, seed: int = 0) -> list[TaskExample]:
        """``n`` seeded instances, each level drawn uniformly over ``levels`` (default: `train_levels`).

        ``levels`` is ``"train"`` (`train_levels`), ``"harder"`` (`harder_levels`), an int or an inclusive
        ``(low, high)`` pair inside `supported_levels`. The same ``(n, levels,
        seed)`` always gives the same list, and the first ``k`` examples of ``generate(n)`` are ``generate(k)``.
        """
        n = _count(n)
        low, high = self._levels(levels)
        seed = seed_int(seed)
        rng = random.Random(f"{self.name}:{low}:{high}:{seed}")
        out = []
        for _ in range(n):
            level = rng.randint(low, high)
            prompt, answer = self._make(level, rng)
            out.append(TaskExample(prompt=prompt, answer=answer, level=level))
        return out

    def solve(self, prompt: str) -> str:  # pragma: no cover - every task overrides it
        raise NotImplementedError

    def level_of(self, prompt: str) -> int:  # pragma: no cover - every task overrides it
        raise NotImplementedError

    def _make(self, level: int, rng: random.Random) -> tuple[str, str]:  # pragma: no cover
        raise NotImplementedError

    def _levels(self, levels) -> tuple[int, int]:
        lo, hi = self.supported_levels
        if levels is None or levels == "train":
            return tuple(self.train_levels)
        if levels == "harder":
            return tuple(self.harder_levels)
        pair = (levels, levels) if _is_int(levels) else levels
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2 or \
                not all(_is_int(v) for v in pair):
            raise ArgumentError(f"levels must be \"train\", \"harder\", an int or an inclusive (low, high) pair of "
                                f"ints, got {levels!r} — "
                                f"pass e.g. levels={self.train_levels} (train) or {self.harder_levels} (harder)")
        low, high = (operator.index(v) for v in pair)
        if low > high:
            raise ArgumentError(f"levels {levels!r} has low > high — pass levels=({high}, {low})")
        if low < lo or high > hi:
            raise ArgumentError(f"task {self.name!r} has levels {lo}..{hi}, got levels={levels!r} — pass levels "
                                f"inside ({lo}, {hi}): train_levels={self.train_levels}, harder_levels="
                                f"{self.harder_levels}")
        return low, high

    def __repr__(self) -> str:
        return f"<Task {self.name!r} train_levels={self.train_levels} harder_levels={self.harder_levels}>"


def _level_ranges(train_max, harder_max, longest: int, limit: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(train_levels, harder_levels)`` of a task whose levels run from 1 to ``longest`` (``limit`` names that
    bound in the error): train 1..train_max, harder train_max+1..harder_max (default: twice train_max, capped)."""
    if not _is_int(train_max) or not 1 <= train_max < longest:
        raise ArgumentError(f"train_max must be an int in [1, {longest - 1}], got {train_max!r} — pass a level "
                            f"below {limit} = {longest}")
    harder_max = min(longest, 2 * train_max) if harder_max is None else harder_max
    if not _is_int(harder_max) or not train_max < harder_max <= longest:
        raise ArgumentError(f"harder_max must be an int in [{train_max + 1}, {longest}], got {harder_max!r} — pass a "
                            f"level above train_max and at most {limit}")
    return (1, int(train_max)), (int(train_max) + 1, int(harder_max))


def _count(n) -> int:
    if not _is_int(n):
        raise ArgumentError(f"n must be an int (how many examples), got {n!r} — pass e.g. n=100")
    n = operator.index(n)
    if n < 0 or n > MAX_EXAMPLES:
        raise ArgumentError(f"n must be in [0, {MAX_EXAMPLES}], got {n} — pass a count of examples in that range")
    return n


def _bad_prompt(task: str, prompt, expected: str) -> ArgumentError:
    return ArgumentError(f"not a {task} prompt: {prompt!r} — pass a prompt of the form {expected} (as generate() "
                         f"makes)")
