"""Fixed-width addition, answer most-significant digit first: the knob is the longest carry chain, not the length.

Example::

    >>> from jacobiscope.data.tasks import get_task
    >>> task = get_task("addition")
    >>> task.solve("00000999+00000001="), task.level_of("00000999+00000001=")
    ('000001000', 3)

Every prompt is ``a+b=`` with both operands zero-padded to `digits` digits and the answer is the sum padded to
``digits + 1`` digits, so every instance has the same length. Written most-significant digit first, the first
answer digit already depends on whether a carry ripples up from below: an instance whose longest run of
consecutive carries is L needs L sequential carry propagations before its first token, which a looped model can
spend loops on. Harder-than-trained levels are longer chains at the same input length.
"""
from __future__ import annotations

import random

from ...errors import ArgumentError
from ._base import Task, _bad_prompt, _is_int

__all__ = ["AdditionTask"]

# (carry in, carry out) -> the digit pairs (a, b) with that carry out: the generator fills a carry pattern with them.
_PAIRS = {(cin, cout): [(a, b) for a in range(10) for b in range(10) if (a + b + cin >= 10) == cout]
          for cin in (0, 1) for cout in (0, 1)}


class AdditionTask(Task):
    """``digits``-digit a+b (zero-padded), answer MSB first; level = longest run of consecutive carries.

    Example::

        >>> from jacobiscope.data.tasks import AdditionTask
        >>> task = AdditionTask(digits=4)
        >>> task.train_levels, task.harder_levels
        ((0, 2), (3, 4))
        >>> [(ex.prompt, ex.answer, ex.level) for ex in task.generate(2, levels=4, seed=1)]
        [('6979+6788=', '13767', 4), ('8819+2787=', '11606', 4)]
    """

    def __init__(self, digits: int = 8, train_max: int | None = None, name: str = "addition"):
        if not _is_int(digits) or not 2 <= digits <= 30:
            raise ArgumentError(f"digits must be an int in [2, 30], got {digits!r} — pass e.g. digits=8")
        train_max = digits // 2 if train_max is None else train_max
        if not _is_int(train_max) or not 0 <= train_max < digits:
            raise ArgumentError(f"train_max must be an int in [0, {digits - 1}], got {train_max!r} — pass a level "
                                f"below digits")
        self.digits = int(digits)
        self.name = name
        self.train_levels = (0, train_max)
        self.harder_levels = (train_max + 1, digits)

    def solve(self, prompt: str) -> str:
        a, b = self._parse(prompt)
        return str(int(a) + int(b)).zfill(self.digits + 1)

    def level_of(self, prompt: str) -> int:
        a, b = self._parse(prompt)
        carry, run, longest = 0, 0, 0
        for da, db in zip(reversed(a), reversed(b)):   # least significant digit first
            carry = int(int(da) + int(db) + carry >= 10)
            run = run + 1 if carry else 0
            longest = max(longest, run)
        return longest

    def _parse(self, prompt) -> tuple[str, str]:
        d = self.digits
        expected = f"'{'1' * d}+{'2' * d}=' ({d}-digit zero-padded operands)"
        if not isinstance(prompt, str) or len(prompt) != 2 * d + 2 or prompt[d] != "+" or prompt[-1] != "=":
            raise _bad_prompt(self.name, prompt, expected)
        a, b = prompt[:d], prompt[d + 1:-1]
        if not (a.isdigit() and b.isdigit() and a.isascii() and b.isascii()):
            raise _bad_prompt(self.name, prompt, expected)
        return a, b

    def _make(self, level: int, rng: random.Random) -> tuple[str, str]:
        carries = _carry_pattern(self.digits, level, rng)
        a, b, cin = [], [], 0
        for cout in carries:   # least significant digit first
            da, db = rng.choice(_PAIRS[cin, cout])
            a.append(str(da))
            b.append(str(db))
            cin = cout
        prompt = "".join(reversed(a)) + "+" + "".join(reversed(b)) + "="
        return prompt, self.solve(prompt)


def _carry_pattern(digits: int, level: int, rng: random.Random) -> list[int]:
    """Carry-out bits (least significant first) whose longest run of ones is exactly ``level``."""
    if level == 0:
        return [0] * digits
    while True:
        bits = [rng.randint(0, 1) for _ in range(digits)]
        start = rng.randint(0, digits - level)
        bits[start:start + level] = [1] * level
        if start > 0:
            bits[start - 1] = 0
        if start + level < digits:
            bits[start + level] = 0
        if _longest_run(bits) == level:   # other runs may come out longer: draw again
            return bits


def _longest_run(bits) -> int:
    run = longest = 0
    for bit in bits:
        run = run + 1 if bit else 0
        longest = max(longest, run)
    return longest
