"""Variable chains: follow references from a queried variable to the digit its chain ends in; the knob is the hops.

Example::

    >>> from jacobiscope.data.tasks import get_task
    >>> task = get_task("chains")
    >>> prompt = "ab,b7,c3,dc,e1,fe,g0,hg,i2,j5,kj,l9,m4,n8,o6,pn|a:"
    >>> task.solve(prompt), task.level_of(prompt)
    ('7', 2)

Every variable (the letters ``a``-``p`` by default) is defined exactly once, as ``xy``: x takes the value of y, a
variable or a digit. The definitions form `chains` disjoint chains, each ending in its own digit; they come in
random order, then the query ``|q:``. The answer is the digit q's chain ends in, and the level is the number of
look-ups that takes (``q`` defined by a digit: level 1). Following the chain takes one look-up per hop, done one
after another: a looped model that does at most one look-up per loop needs about ``level`` loops, so harder levels
need more loops than the trained depth. Every prompt has the same length and the same number of chains whatever the
level (the other chains take the remaining variables in random lengths): harder instances test depth, not length,
and picking one of the digits present is right 1 time in `chains` at every level.
"""
from __future__ import annotations

import random
import string

from ...errors import ArgumentError
from ._base import Task, _bad_prompt, _is_int, _level_ranges

__all__ = ["ChainTask"]


class ChainTask(Task):
    """The digit the queried variable's chain of ``variables`` one-definition variables ends in; level = the hops.

    Example::

        >>> from jacobiscope.data.tasks import ChainTask
        >>> task = ChainTask(variables=8, train_max=2, harder_max=4)
        >>> task.train_levels, task.harder_levels
        ((1, 2), (3, 4))
        >>> ex = task.generate(1, levels=4, seed=0)[0]
        >>> len(ex.prompt), task.solve(ex.prompt) == ex.answer, task.level_of(ex.prompt)
        (26, True, 4)
    """

    def __init__(self, variables: int = 16, train_max: int = 4, harder_max: int | None = None, chains: int = 4,
                 name: str = "chains", queries: int = 1):
        if not _is_int(variables) or not 2 <= variables <= 26:
            raise ArgumentError(f"variables must be an int in [2, 26] (letters a-z), got {variables!r} — pass e.g. "
                                f"variables=16")
        if not _is_int(chains) or not 2 <= chains <= min(10, variables - 1):
            raise ArgumentError(f"chains must be an int in [2, {min(10, variables - 1)}] (one digit each, the "
                                f"query's chain and at least one other), got {chains!r} — pass e.g. chains=4")
        # The longest query chain: every other chain has one variable.
        levels = _level_ranges(train_max, harder_max, variables - chains + 1, "variables - chains + 1")
        if not _is_int(queries) or not 1 <= queries <= chains:
            raise ArgumentError(f"queries must be an int in [1, {chains}] (one per chain, so that no answer can be "
                                f"copied from another), got {queries!r} — pass e.g. queries={chains}")
        self.chains, self.queries = int(chains), int(queries)
        self.variables = int(variables)
        self.labels = string.ascii_lowercase[:self.variables]
        self.name = name
        self.train_levels, self.harder_levels = levels

    def solve(self, prompt: str) -> str:
        definitions, queries = self._parse(prompt)
        return "".join(self._follow(prompt, definitions, query)[0] for query in queries)

    def level_of(self, prompt: str) -> int:
        """The look-ups of the longest-reaching query."""
        definitions, queries = self._parse(prompt)
        return max(self._follow(prompt, definitions, query)[1] for query in queries)

    def _follow(self, prompt, definitions, query) -> tuple[str, int]:
        value, hops = query, 0
        while not value.isdigit():
            value, hops = definitions[value], hops + 1
            if hops > self.variables:
                raise _bad_prompt(self.name, prompt, self._expected("(its chains end in digits, no cycle)"))
        return value, hops

    def _expected(self, why: str) -> str:
        first = ",".join(f"{a}{b}" for a, b in zip(self.labels, self.labels[1:] + "7"))
        return f"'{first}|{self.labels[:self.queries]}:' {why}"

    def _parse(self, prompt) -> tuple[dict, str]:
        """The definitions and the queried variables."""
        expected = self._expected(f"(each of {self.labels[0]}-{self.labels[-1]} defined once, by a letter or digit)")
        if not isinstance(prompt, str) or "|" not in prompt or not prompt.endswith(":"):
            raise _bad_prompt(self.name, prompt, expected)
        body, query = prompt[:-1].split("|", 1)
        pairs = body.split(",")
        definitions = {p[0]: p[1] for p in pairs if len(p) == 2}
        allowed = set(self.labels) | set(string.digits)
        if len(pairs) != self.variables or set(definitions) != set(self.labels) or \
                not set(definitions.values()) <= allowed or len(query) != self.queries or \
                len(set(query)) != self.queries or not set(query) <= set(definitions):
            raise _bad_prompt(self.name, prompt, expected)
        return definitions, query

    def _make(self, level: int, rng: random.Random) -> tuple[str, str]:
        names = list(self.labels)
        rng.shuffle(names)
        digits = rng.sample(string.digits, self.chains)   # one digit per chain, all different
        rest = len(names) - level
        # The other chains' lengths: a random composition of the remaining variables into chains - 1 parts >= 1.
        cuts = sorted(rng.sample(range(1, rest), self.chains - 2))
        lengths = [level] + [b - a for a, b in zip([0] + cuts, cuts + [rest])]
        definitions, start, chains = {}, 0, []
        for length, digit in zip(lengths, digits):
            chain = names[start:start + length]
            definitions.update(zip(chain, chain[1:] + [digit]))
            chains.append(chain)
            start += length
        pairs = [a + b for a, b in definitions.items()]
        rng.shuffle(pairs)
        asked = [(names[0], digits[0])]   # the query at exactly `level` look-ups
        if self.queries > 1:  # one more query on each of other chains, at most `level` look-ups from its end
            for index in sorted(rng.sample(range(1, self.chains), self.queries - 1)):
                hops = rng.randint(1, min(level, len(chains[index])))
                asked.append((chains[index][len(chains[index]) - hops], digits[index]))
            rng.shuffle(asked)
        return ",".join(pairs) + "|" + "".join(q for q, _ in asked) + ":", "".join(d for _, d in asked)
