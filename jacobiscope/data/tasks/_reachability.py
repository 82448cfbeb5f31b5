"""Reachability by hops in a small fixed-size graph: the knob is the number of hops from s to t, not the length.

Example::

    >>> from jacobiscope.data.tasks import get_task
    >>> task = get_task("reachability")
    >>> prompt = "ab,bc,cd,da,ee,fe,ge,he|a>d:"
    >>> task.solve(prompt), task.level_of(prompt)
    ('3', 3)

Every node of the graph (the letters ``a``-``h`` by default) has exactly one outgoing edge ``xy`` (x -> y); the
edges come in random order, then the query ``s>t:``. The answer is the number of hops of the walk from s to t
(one digit). Following the walk takes one edge look-up per hop, so an instance at level k needs k sequential
look-ups; every prompt has the same length whatever k is. Unreachable queries (never generated) answer ``-``.
"""
from __future__ import annotations

import random
import string

from ...errors import ArgumentError
from ._base import Task, _bad_prompt, _is_int

__all__ = ["ReachabilityTask"]


class ReachabilityTask(Task):
    """Hops from s to t in a graph where each of ``nodes`` nodes has one outgoing edge; level = the hop count.

    Example::

        >>> from jacobiscope.data.tasks import ReachabilityTask
        >>> task = ReachabilityTask(nodes=4)
        >>> task.train_levels, task.harder_levels
        ((1, 2), (3, 3))
        >>> ex = task.generate(1, levels=3, seed=0)[0]
        >>> len(ex.prompt), ex.answer, task.level_of(ex.prompt)
        (16, '3', 3)
    """

    def __init__(self, nodes: int = 8, train_max: int | None = None, name: str = "reachability"):
        if not _is_int(nodes) or not 3 <= nodes <= 10:
            raise ArgumentError(f"nodes must be an int in [3, 10] (answers are one digit), got {nodes!r} — pass "
                                f"e.g. nodes=8")
        train_max = nodes // 2 if train_max is None else train_max
        if not _is_int(train_max) or not 1 <= train_max < nodes - 1:
            raise ArgumentError(f"train_max must be an int in [1, {nodes - 2}], got {train_max!r} — pass a hop "
                                f"count below nodes - 1")
        self.nodes = int(nodes)
        self.labels = string.ascii_lowercase[:self.nodes]
        self.name = name
        self.train_levels = (1, train_max)
        self.harder_levels = (train_max + 1, self.nodes - 1)

    def solve(self, prompt: str) -> str:
        hops, _ = self._walk(prompt)
        return "-" if hops is None else str(hops)

    def level_of(self, prompt: str) -> int:
        """The hops from s to t; for an unreachable t, the hops the walk from s takes before it repeats."""
        hops, walked = self._walk(prompt)
        return walked if hops is None else hops

    def _walk(self, prompt) -> tuple[int | None, int]:
        edges, source, target = self._parse(prompt)
        node, seen = source, set()
        for hops in range(len(edges) + 1):
            if node == target:
                return hops, hops
            if node in seen:
                return None, hops
            seen.add(node)
            node = edges[node]
        return None, len(edges)

    def _parse(self, prompt) -> tuple[dict, str, str]:
        expected = f"'{','.join(a + b for a, b in zip(self.labels, self.labels[1:] + self.labels[0]))}|a>c:' " \
                   f"(one outgoing edge per node {self.labels[0]}-{self.labels[-1]})"
        if not isinstance(prompt, str) or "|" not in prompt or not prompt.endswith(":"):
            raise _bad_prompt(self.name, prompt, expected)
        graph, query = prompt[:-1].split("|", 1)
        pairs = graph.split(",")
        edges = {p[0]: p[1] for p in pairs if len(p) == 2}
        nodes = set(self.labels)
        if len(pairs) != self.nodes or len(edges) != self.nodes or set(edges) != nodes or \
                not set(edges.values()) <= nodes or len(query) != 3 or query[1] != ">" or \
                not {query[0], query[2]} <= nodes:
            raise _bad_prompt(self.name, prompt, expected)
        return edges, query[0], query[2]

    def _make(self, level: int, rng: random.Random) -> tuple[str, str]:
        path = rng.sample(self.labels, level + 1)   # s = path[0] -> ... -> path[level] = t, all distinct
        edges = {a: b for a, b in zip(path, path[1:])}
        for node in self.labels:
            if node not in edges:   # the walk from s meets t first at hop `level` whatever these point at
                edges[node] = rng.choice(self.labels)
        pairs = [a + b for a, b in edges.items()]
        rng.shuffle(pairs)
        prompt = ",".join(pairs) + f"|{path[0]}>{path[-1]}:"
        return prompt, str(level)
