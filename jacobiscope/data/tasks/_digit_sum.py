"""Digit sums: the sum of a row of digits modulo ``modulus`` (``modulus=2``: the parity of a bit string); the knob is
the number of digits.

Example::

    >>> from jacobiscope.data.tasks import get_task
    >>> task = get_task("parity")
    >>> prompt = "-------------------10110:"
    >>> task.solve(prompt), task.level_of(prompt)
    ('1', 5)

A prompt is `cells` cells then ``:``; the first cells are blanks (``-``), the last ``level`` are digits in
``0 .. modulus-1``. The answer is their sum modulo ``modulus``, one digit. Every prompt has the same length whatever
the level. A model whose attention sees only a few cells back (Dory with a sliding window of 2, say) must carry a
running sum one cell further per pass, so ``level`` digits need about ``level`` passes: harder levels (more digits,
the same length) need more loops than the trained depth, and no single pass can shortcut them. A model with full
attention can try to read all digits at once; the parity of many bits is the classic case where that fails.
"""
from __future__ import annotations

import random

from ...errors import ArgumentError
from ._base import Task, _bad_prompt, _is_int, _level_ranges

__all__ = ["DigitSumTask"]

_BLANK = "-"


class DigitSumTask(Task):
    """The sum modulo ``modulus`` of the digits in a row of ``cells`` cells; level = how many digits.

    Example::

        >>> from jacobiscope.data.tasks import DigitSumTask
        >>> task = DigitSumTask(cells=10, modulus=10, train_max=4, name="digitsum10")
        >>> task.train_levels, task.harder_levels
        ((1, 4), (5, 8))
        >>> ex = task.generate(1, levels=6, seed=0)[0]
        >>> len(ex.prompt), task.solve(ex.prompt) == ex.answer, task.level_of(ex.prompt)
        (11, True, 6)
        >>> task.solve("------9876:")
        '0'
    """

    def __init__(self, cells: int = 24, modulus: int = 2, train_max: int = 8, harder_max: int | None = None,
                 name: str = "digitsum"):
        if not _is_int(cells) or not 2 <= cells <= 200:
            raise ArgumentError(f"cells must be an int in [2, 200], got {cells!r} — pass e.g. cells=24")
        if not _is_int(modulus) or not 2 <= modulus <= 10:
            raise ArgumentError(f"modulus must be an int in [2, 10] (the answer is one digit), got {modulus!r} — "
                                f"pass modulus=2 for parity or 10 for the last digit of the sum")
        self.train_levels, self.harder_levels = _level_ranges(train_max, harder_max, int(cells), "cells")
        self.cells, self.modulus, self.name = int(cells), int(modulus), name

    def solve(self, prompt: str) -> str:
        return str(sum(int(c) for c in self._digits(prompt)) % self.modulus)

    def level_of(self, prompt: str) -> int:
        return len(self._digits(prompt))

    def _digits(self, prompt) -> str:
        allowed = "0123456789"[:self.modulus]
        if not isinstance(prompt, str) or not prompt.endswith(":") or len(prompt) != self.cells + 1:
            raise _bad_prompt(self.name, prompt, self._expected())
        row = prompt[:-1]
        digits = row.lstrip(_BLANK)
        if not digits or not all(c in allowed for c in digits):
            raise _bad_prompt(self.name, prompt, self._expected())
        return digits

    def _expected(self) -> str:
        example = (_BLANK * self.cells + "1" * min(3, self.cells))[-self.cells:]
        return (f"'{example}:' ({self.cells} cells: blanks '-' then at least one digit in 0-{self.modulus - 1}, "
                f"then ':')")

    def _make(self, level: int, rng: random.Random) -> tuple[str, str]:
        digits = [rng.randrange(self.modulus) for _ in range(level)]
        prompt = _BLANK * (self.cells - level) + "".join(map(str, digits)) + ":"
        return prompt, str(sum(digits) % self.modulus)
