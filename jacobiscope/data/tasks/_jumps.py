"""Jumps: walk left from the last cell, each digit cell sending the walk that many cells back, to the letter it lands
on; the knob is the number of jumps.

Example::

    >>> from jacobiscope.data.tasks import get_task
    >>> task = get_task("jumps")
    >>> prompt = "133132321wlq22z1os22c323ixv21222:"
    >>> task.solve(prompt), task.level_of(prompt)
    ('x', 3)

A prompt is `cells` cells then ``:``; a cell is a jump (``1``-``3``) or a letter. The walk starts at the last cell
and moves left by each jump cell's digit until it stands on a letter: the answer. The level is the number of jumps.
Where the walk goes next depends on the digit it just read, so the jumps are resolved one after another, each by a
look a fixed 1-3 cells back from where the walk stands: a loop that moves information a few cells per pass needs
about ``level`` passes, and harder levels (more jumps, the same number of cells) need more loops than the trained
depth. Every prompt has the same length and the same number of letters (`letters`, all different) whatever the
level, so neither the length nor the letters present give the answer away.
"""
from __future__ import annotations

import random
import string

from ...errors import ArgumentError
from ._base import Task, _bad_prompt, _is_int, _level_ranges

__all__ = ["JumpTask"]

_JUMPS = "123"


class JumpTask(Task):
    """The letter a leftward walk of digit-sized jumps from the last of ``cells`` cells lands on; level = jumps.

    Example::

        >>> from jacobiscope.data.tasks import JumpTask
        >>> task = JumpTask(cells=12, train_max=2, harder_max=4, letters=3)
        >>> task.train_levels, task.harder_levels
        ((1, 2), (3, 4))
        >>> ex = task.generate(1, levels=4, seed=0)[0]
        >>> len(ex.prompt), task.solve(ex.prompt) == ex.answer, task.level_of(ex.prompt)
        (13, True, 4)
    """

    def __init__(self, cells: int = 32, train_max: int = 4, harder_max: int | None = None, letters: int = 6,
                 name: str = "jumps"):
        if not _is_int(cells) or not 4 <= cells <= 200:
            raise ArgumentError(f"cells must be an int in [4, 200], got {cells!r} — pass e.g. cells=32")
        if not _is_int(letters) or not 2 <= letters <= min(26, cells // 2):
            raise ArgumentError(f"letters must be an int in [2, {min(26, cells // 2)}] (all different, at most half "
                                f"the cells), got {letters!r} — pass e.g. letters=6")
        # The walk must fit beside the other letters: at most one cell per jump plus the letters.
        levels = _level_ranges(train_max, harder_max, cells - letters, "cells - letters")
        self.cells, self.letters = int(cells), int(letters)
        self.name = name
        self.train_levels, self.harder_levels = levels

    def solve(self, prompt: str) -> str:
        return self._walk(prompt)[0]

    def level_of(self, prompt: str) -> int:
        return self._walk(prompt)[1]

    def _walk(self, prompt) -> tuple[str, int]:
        cells = self._parse(prompt)
        position, jumps = len(cells) - 1, 0
        while cells[position] in _JUMPS:
            position -= int(cells[position])
            jumps += 1
            if position < 0:
                raise _bad_prompt(self.name, prompt, self._expected("(the walk left the cells before a letter)"))
        return cells[position], jumps

    def _expected(self, why: str) -> str:
        return f"'{('a12' * self.cells)[:self.cells - 1]}1:' ({self.cells} cells, digits 1-3 and letters) {why}"

    def _parse(self, prompt) -> str:
        if not isinstance(prompt, str) or not prompt.endswith(":") or len(prompt) != self.cells + 1 or \
                not all(c in _JUMPS or c in string.ascii_lowercase for c in prompt[:-1]):
            raise _bad_prompt(self.name, prompt, self._expected(f"with {self.letters} different letters"))
        return prompt[:-1]

    def _make(self, level: int, rng: random.Random) -> tuple[str, str]:
        for _ in range(1000):   # a walk that fits (its jumps sum to less than the cells) comes within a few draws
            jumps = [rng.choice((1, 2, 3)) for _ in range(level)]
            if sum(jumps) <= self.cells - 1 and self.cells - level - 1 >= self.letters - 1:
                break
        else:  # pragma: no cover - every level the constructor admits fits with jumps of 1
            jumps = [1] * level
        cells = [None] * self.cells
        position = self.cells - 1
        for jump in jumps:
            cells[position] = str(jump)
            position -= jump
        letters = rng.sample(string.ascii_lowercase, self.letters)
        cells[position] = letters[0]
        free = [i for i, cell in enumerate(cells) if cell is None]
        for index, letter in zip(rng.sample(free, self.letters - 1), letters[1:]):
            cells[index] = letter
        cells = [cell if cell is not None else rng.choice(_JUMPS) for cell in cells]
        return "".join(cells) + ":", letters[0]
